module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<16x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg2: tensor<64x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg3: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg4: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg5: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<16x64xf32> {jax.result_info = "result[0]"}, tensor<64xf32> {jax.result_info = "result[1]"}, tensor<64x8xf32> {jax.result_info = "result[2]"}, tensor<8xf32> {jax.result_info = "result[3]"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %0:7 = stablehlo.optimization_barrier %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %cst : tensor<16x64xf32>, tensor<64xf32>, tensor<64x8xf32>, tensor<8xf32>, tensor<32x16xf32>, tensor<32x8xf32>, tensor<f32>
    %1 = stablehlo.dot_general %0#4, %0#0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x16xf32>, tensor<16x64xf32>) -> tensor<32x64xf32>
    %2 = stablehlo.broadcast_in_dim %0#1, dims = [1] : (tensor<64xf32>) -> tensor<1x64xf32>
    %3 = stablehlo.broadcast_in_dim %2, dims = [0, 1] : (tensor<1x64xf32>) -> tensor<32x64xf32>
    %4 = stablehlo.add %1, %3 : tensor<32x64xf32>
    %5 = call @relu(%4) : (tensor<32x64xf32>) -> tensor<32x64xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %6 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
    %7 = stablehlo.compare GT, %4, %6, FLOAT : (tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<32x64xi1>
    %8 = stablehlo.dot_general %5, %0#2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x64xf32>, tensor<64x8xf32>) -> tensor<32x8xf32>
    %9 = stablehlo.broadcast_in_dim %0#3, dims = [1] : (tensor<8xf32>) -> tensor<1x8xf32>
    %10 = stablehlo.broadcast_in_dim %9, dims = [0, 1] : (tensor<1x8xf32>) -> tensor<32x8xf32>
    %11 = stablehlo.add %8, %10 : tensor<32x8xf32>
    %12 = stablehlo.subtract %11, %0#5 : tensor<32x8xf32>
    %cst_1 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %13 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<32x8xf32>
    %14 = stablehlo.multiply %13, %12 : tensor<32x8xf32>
    %cst_2 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %15 = stablehlo.divide %0#6, %cst_2 : tensor<f32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [] : (tensor<f32>) -> tensor<32x8xf32>
    %17 = stablehlo.multiply %16, %14 : tensor<32x8xf32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %18 = stablehlo.reduce(%17 init: %cst_3) applies stablehlo.add across dimensions = [0] : (tensor<32x8xf32>, tensor<f32>) -> tensor<8xf32>
    %19 = stablehlo.reshape %18 : (tensor<8xf32>) -> tensor<1x8xf32>
    %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %20 = stablehlo.reduce(%19 init: %cst_4) applies stablehlo.add across dimensions = [0] : (tensor<1x8xf32>, tensor<f32>) -> tensor<8xf32>
    %21 = stablehlo.dot_general %17, %5, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x8xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %22 = stablehlo.transpose %21, dims = [1, 0] : (tensor<8x64xf32>) -> tensor<64x8xf32>
    %23 = stablehlo.dot_general %17, %0#2, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<32x8xf32>, tensor<64x8xf32>) -> tensor<32x64xf32>
    %cst_5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %24 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
    %25 = stablehlo.select %7, %23, %24 : tensor<32x64xi1>, tensor<32x64xf32>
    %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %26 = stablehlo.reduce(%25 init: %cst_6) applies stablehlo.add across dimensions = [0] : (tensor<32x64xf32>, tensor<f32>) -> tensor<64xf32>
    %27 = stablehlo.reshape %26 : (tensor<64xf32>) -> tensor<1x64xf32>
    %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %28 = stablehlo.reduce(%27 init: %cst_7) applies stablehlo.add across dimensions = [0] : (tensor<1x64xf32>, tensor<f32>) -> tensor<64xf32>
    %29 = stablehlo.dot_general %25, %0#4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x64xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
    %30 = stablehlo.transpose %29, dims = [1, 0] : (tensor<64x16xf32>) -> tensor<16x64xf32>
    return %30, %28, %22, %20 : tensor<16x64xf32>, tensor<64xf32>, tensor<64x8xf32>, tensor<8xf32>
  }
  func.func private @relu(%arg0: tensor<32x64xf32>) -> tensor<32x64xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<32x64xf32>
    return %1 : tensor<32x64xf32>
  }
}

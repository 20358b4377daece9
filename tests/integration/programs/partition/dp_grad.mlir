module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<16x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg2: tensor<64x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg3: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg4: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg5: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<16x64xf32> {jax.result_info = "result[0]"}, tensor<64xf32> {jax.result_info = "result[1]"}, tensor<64x8xf32> {jax.result_info = "result[2]"}, tensor<8xf32> {jax.result_info = "result[3]"}) {
    %0 = stablehlo.dot_general %arg4, %arg0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x16xf32>, tensor<16x64xf32>) -> tensor<32x64xf32>
    %1 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<64xf32>) -> tensor<1x64xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x64xf32>) -> tensor<32x64xf32>
    %3 = stablehlo.add %0, %2 : tensor<32x64xf32>
    %4 = call @relu(%3) : (tensor<32x64xf32>) -> tensor<32x64xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
    %6 = stablehlo.compare GT, %3, %5, FLOAT : (tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<32x64xi1>
    %7 = stablehlo.dot_general %4, %arg2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x64xf32>, tensor<64x8xf32>) -> tensor<32x8xf32>
    %8 = stablehlo.broadcast_in_dim %arg3, dims = [1] : (tensor<8xf32>) -> tensor<1x8xf32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1] : (tensor<1x8xf32>) -> tensor<32x8xf32>
    %10 = stablehlo.add %7, %9 : tensor<32x8xf32>
    %11 = stablehlo.subtract %10, %arg5 : tensor<32x8xf32>
    %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<32x8xf32>
    %13 = stablehlo.multiply %12, %11 : tensor<32x8xf32>
    %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_2 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %14 = stablehlo.divide %cst_1, %cst_2 : tensor<f32>
    %15 = stablehlo.broadcast_in_dim %14, dims = [] : (tensor<f32>) -> tensor<32x8xf32>
    %16 = stablehlo.multiply %15, %13 : tensor<32x8xf32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %17 = stablehlo.reduce(%16 init: %cst_3) applies stablehlo.add across dimensions = [0] : (tensor<32x8xf32>, tensor<f32>) -> tensor<8xf32>
    %18 = stablehlo.reshape %17 : (tensor<8xf32>) -> tensor<1x8xf32>
    %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %19 = stablehlo.reduce(%18 init: %cst_4) applies stablehlo.add across dimensions = [0] : (tensor<1x8xf32>, tensor<f32>) -> tensor<8xf32>
    %20 = stablehlo.dot_general %16, %4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x8xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %21 = stablehlo.transpose %20, dims = [1, 0] : (tensor<8x64xf32>) -> tensor<64x8xf32>
    %22 = stablehlo.dot_general %16, %arg2, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<32x8xf32>, tensor<64x8xf32>) -> tensor<32x64xf32>
    %cst_5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %23 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
    %24 = stablehlo.select %6, %22, %23 : tensor<32x64xi1>, tensor<32x64xf32>
    %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %25 = stablehlo.reduce(%24 init: %cst_6) applies stablehlo.add across dimensions = [0] : (tensor<32x64xf32>, tensor<f32>) -> tensor<64xf32>
    %26 = stablehlo.reshape %25 : (tensor<64xf32>) -> tensor<1x64xf32>
    %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %27 = stablehlo.reduce(%26 init: %cst_7) applies stablehlo.add across dimensions = [0] : (tensor<1x64xf32>, tensor<f32>) -> tensor<64xf32>
    %28 = stablehlo.dot_general %24, %arg4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x64xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
    %29 = stablehlo.transpose %28, dims = [1, 0] : (tensor<64x16xf32>) -> tensor<16x64xf32>
    return %29, %27, %21, %19 : tensor<16x64xf32>, tensor<64xf32>, tensor<64x8xf32>, tensor<8xf32>
  }
  func.func private @relu(%arg0: tensor<32x64xf32>) -> tensor<32x64xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<32x64xf32>
    return %1 : tensor<32x64xf32>
  }
}

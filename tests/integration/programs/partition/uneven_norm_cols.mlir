module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}, {name = "y", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<10x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<10x6xf32> {jax.result_info = "result"}) {
    %0 = sdy.sharding_constraint %arg0 <@mesh, [{"x"}, {"y"}]> : tensor<10x6xf32>
    %1 = call @standardize(%0) : (tensor<10x6xf32>) -> tensor<10x6xf32>
    return %1 : tensor<10x6xf32>
  }
  func.func private @standardize(%arg0: tensor<10x6xf32>) -> tensor<10x6xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<10x6xf32>, tensor<f32>) -> tensor<10xf32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [0] : (tensor<10xf32>) -> tensor<10x1xf32>
    %cst_0 = stablehlo.constant dense<6.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<10x1xf32>
    %3 = stablehlo.divide %1, %2 : tensor<10x1xf32>
    %4 = chlo.square %arg0 : tensor<10x6xf32> -> tensor<10x6xf32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.reduce(%4 init: %cst_1) applies stablehlo.add across dimensions = [1] : (tensor<10x6xf32>, tensor<f32>) -> tensor<10xf32>
    %6 = stablehlo.broadcast_in_dim %5, dims = [0] : (tensor<10xf32>) -> tensor<10x1xf32>
    %cst_2 = stablehlo.constant dense<6.000000e+00> : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<10x1xf32>
    %8 = stablehlo.divide %6, %7 : tensor<10x1xf32>
    %9 = chlo.square %3 : tensor<10x1xf32> -> tensor<10x1xf32>
    %10 = stablehlo.subtract %8, %9 : tensor<10x1xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %11 = call @clip(%10, %c) : (tensor<10x1xf32>, tensor<i32>) -> tensor<10x1xf32>
    %12 = stablehlo.broadcast_in_dim %3, dims = [0, 1] : (tensor<10x1xf32>) -> tensor<10x6xf32>
    %13 = stablehlo.subtract %arg0, %12 : tensor<10x6xf32>
    %cst_3 = stablehlo.constant dense<9.99999974E-6> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<10x1xf32>
    %15 = stablehlo.add %11, %14 : tensor<10x1xf32>
    %16 = stablehlo.rsqrt %15 : tensor<10x1xf32>
    %17 = stablehlo.broadcast_in_dim %16, dims = [0, 1] : (tensor<10x1xf32>) -> tensor<10x6xf32>
    %18 = stablehlo.multiply %13, %17 : tensor<10x6xf32>
    return %18 : tensor<10x6xf32>
  }
  func.func private @clip(%arg0: tensor<10x1xf32>, %arg1: tensor<i32>) -> tensor<10x1xf32> {
    %0 = stablehlo.convert %arg1 : (tensor<i32>) -> tensor<f32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<10x1xf32>
    %2 = stablehlo.maximum %1, %arg0 : tensor<10x1xf32>
    return %2 : tensor<10x1xf32>
  }
}

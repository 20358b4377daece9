module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<16x32xi32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<16x32xf32>
    %1 = stablehlo.compare GT, %arg0, %0, FLOAT : (tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<16x32xi1>
    %cst_0 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<16x32xf32>
    %3 = stablehlo.multiply %2, %arg0 : tensor<16x32xf32>
    %4 = call @_where(%1, %arg0, %3) : (tensor<16x32xi1>, tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
    %5 = stablehlo.convert %4 : (tensor<16x32xf32>) -> tensor<16x32xi32>
    %cst_1 = stablehlo.constant dense<-1.000000e+00> : tensor<f32>
    %6 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<16x32xf32>
    %7 = stablehlo.compare LT, %arg0, %6, FLOAT : (tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<16x32xi1>
    %8 = stablehlo.convert %7 : (tensor<16x32xi1>) -> tensor<16x32xi32>
    %9 = stablehlo.add %5, %8 : tensor<16x32xi32>
    return %9 : tensor<16x32xi32>
  }
  func.func private @_where(%arg0: tensor<16x32xi1>, %arg1: tensor<16x32xf32>, %arg2: tensor<16x32xf32>) -> tensor<16x32xf32> {
    %0 = stablehlo.select %arg0, %arg1, %arg2 : tensor<16x32xi1>, tensor<16x32xf32>
    return %0 : tensor<16x32xf32>
  }
}

module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<16x12xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.slice %arg0 [0:16, 2:10] : (tensor<16x32xf32>) -> tensor<16x8xf32>
    %1 = stablehlo.slice %arg0 [0:16, 0:4] : (tensor<16x32xf32>) -> tensor<16x4xf32>
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<16x4xf32>
    %3 = stablehlo.multiply %1, %2 : tensor<16x4xf32>
    %4 = stablehlo.concatenate %0, %3, dim = 1 : (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<16x12xf32>
    return %4 : tensor<16x12xf32>
  }
}

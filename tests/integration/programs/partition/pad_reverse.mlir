module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<16x37xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0 = call @_pad(%arg0, %c) : (tensor<16x32xf32>, tensor<i32>) -> tensor<16x37xf32>
    %1 = stablehlo.reverse %0, dims = [1] : tensor<16x37xf32>
    %cst = stablehlo.constant dense<3.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<16x37xf32>
    %3 = stablehlo.multiply %1, %2 : tensor<16x37xf32>
    return %3 : tensor<16x37xf32>
  }
  func.func private @_pad(%arg0: tensor<16x32xf32>, %arg1: tensor<i32>) -> tensor<16x37xf32> {
    %0 = stablehlo.convert %arg1 : (tensor<i32>) -> tensor<f32>
    %1 = stablehlo.pad %arg0, %0, low = [0, 2], high = [0, 3], interior = [0, 0] : (tensor<16x32xf32>, tensor<f32>) -> tensor<16x37xf32>
    return %1 : tensor<16x37xf32>
  }
}

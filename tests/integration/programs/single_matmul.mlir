module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x6xf32>, %arg1: tensor<6x3xf32>) -> (tensor<4x3xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
    %1 = stablehlo.tanh %0 : tensor<4x3xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x3xf32>
    %3 = stablehlo.add %1, %2 : tensor<4x3xf32>
    return %3 : tensor<4x3xf32>
  }
}

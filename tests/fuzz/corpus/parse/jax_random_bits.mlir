module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<4xui32> {jax.result_info = "result[0]"}, tensor<4xui32> {jax.result_info = "result[1]"}) {
    %c = stablehlo.constant dense<0> : tensor<ui32>
    %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<ui32>) -> tensor<4xui32>
    %1 = stablehlo.reshape %0 : (tensor<4xui32>) -> tensor<2x2xui32>
    %2 = stablehlo.bitcast_convert %1 : (tensor<2x2xui32>) -> tensor<2xui64>
    %output_state, %output = stablehlo.rng_bit_generator %2, algorithm = DEFAULT : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
    %3 = stablehlo.bitcast_convert %output_state : (tensor<2xui64>) -> tensor<2x2xui32>
    %4 = stablehlo.reshape %3 : (tensor<2x2xui32>) -> tensor<4xui32>
    return %4, %output : tensor<4xui32>, tensor<4xui32>
  }
}

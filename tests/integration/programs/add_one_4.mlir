module @jit__lambda attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=4]> {stablehlo.mesh = {axes = [{name = "d", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8xi32>) -> (tensor<8xi32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"d"}]>] out_shardings=[<@mesh, [{"d"}]>] manual_axes={"d"} (%arg1: tensor<2xi32>) {
      %c = stablehlo.constant dense<1> : tensor<i32>
      %1 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<2xi32>
      %2 = stablehlo.add %arg1, %1 : tensor<2xi32>
      sdy.return %2 : tensor<2xi32>
    } : (tensor<8xi32>) -> tensor<8xi32>
    return %0 : tensor<8xi32>
  }
}

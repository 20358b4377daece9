module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}, {name = "y", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16xf32>) -> (tensor<8x16xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"x"}, {"y"}]>, <@mesh, [{"y"}]>] out_shardings=[<@mesh, [{"x"}, {"y"}]>] manual_axes={"x", "y"} (%arg2: tensor<4x4xf32>, %arg3: tensor<4xf32>) {
      %1 = stablehlo.broadcast_in_dim %arg3, dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>
      %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x4xf32>) -> tensor<4x4xf32>
      %3 = stablehlo.multiply %arg2, %2 : tensor<4x4xf32>
      %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %4 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
      %5 = stablehlo.add %3, %4 : tensor<4x4xf32>
      sdy.return %5 : tensor<4x4xf32>
    } : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}

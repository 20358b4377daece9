module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<8x10x10x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}, {}, {}]>}) -> (tensor<8x10x10x3xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}, {}, {}]>}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x5x5x3xf32>
    %cst_0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %1 = stablehlo.pad %arg0, %cst_0, low = [0, 0, 0, 0], high = [0, 0, 0, 0], interior = [0, 0, 0, 0] : (tensor<8x10x10x3xf32>, tensor<f32>) -> tensor<8x10x10x3xf32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = "stablehlo.select_and_scatter"(%1, %0, %cst_1) <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %4 = stablehlo.compare GE, %arg1, %arg2, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %4 : tensor<i1>
    }, {
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %4 = stablehlo.add %arg1, %arg2 : tensor<f32>
      stablehlo.return %4 : tensor<f32>
    }) : (tensor<8x10x10x3xf32>, tensor<8x5x5x3xf32>, tensor<f32>) -> tensor<8x10x10x3xf32>
    %3 = stablehlo.slice %2 [0:8, 0:10, 0:10, 0:3] : (tensor<8x10x10x3xf32>) -> tensor<8x10x10x3xf32>
    return %3 : tensor<8x10x10x3xf32>
  }
}

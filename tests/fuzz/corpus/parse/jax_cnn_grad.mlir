module @jit_cnn attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3x3x2x4xf32>, %arg1: tensor<2x8x8x2xf32>) -> (tensor<3x3x2x4xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.convolution(%arg1, %arg0) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<2x8x8x2xf32>, tensor<3x3x2x4xf32>) -> tensor<2x8x8x4xf32>
    %1 = call @relu(%0) : (tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8x8x4xf32>
    %3 = stablehlo.compare GT, %0, %2, FLOAT : (tensor<2x8x8x4xf32>, tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xi1>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %4 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x4x4x4xf32>
    %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %5 = stablehlo.pad %1, %cst_1, low = [0, 0, 0, 0], high = [0, 0, 0, 0], interior = [0, 0, 0, 0] : (tensor<2x8x8x4xf32>, tensor<f32>) -> tensor<2x8x8x4xf32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %6 = "stablehlo.select_and_scatter"(%5, %4, %cst_2) <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %11 = stablehlo.compare GE, %arg2, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %11 : tensor<i1>
    }, {
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %11 = stablehlo.add %arg2, %arg3 : tensor<f32>
      stablehlo.return %11 : tensor<f32>
    }) : (tensor<2x8x8x4xf32>, tensor<2x4x4x4xf32>, tensor<f32>) -> tensor<2x8x8x4xf32>
    %7 = stablehlo.slice %6 [0:2, 0:8, 0:8, 0:4] : (tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %8 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<2x8x8x4xf32>
    %9 = stablehlo.select %3, %7, %8 : tensor<2x8x8x4xi1>, tensor<2x8x8x4xf32>
    %10 = stablehlo.convolution(%arg1, %9) dim_numbers = [f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<2x8x8x2xf32>, tensor<2x8x8x4xf32>) -> tensor<3x3x2x4xf32>
    return %10 : tensor<3x3x2x4xf32>
  }
  func.func private @relu(%arg0: tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8x8x4xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<2x8x8x4xf32>
    return %1 : tensor<2x8x8x4xf32>
  }
}

func.func @main(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x5xf32>) -> tensor<1x4x4x5xf32> {
 %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [0, 2]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x4x2xf32>, tensor<3x3x2x5xf32>) -> tensor<1x4x4x5xf32>
 return %0 : tensor<1x4x4x5xf32>
}

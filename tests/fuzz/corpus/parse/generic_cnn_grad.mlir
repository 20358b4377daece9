"builtin.module"() <{sym_name = "jit_cnn"}> ({
  "func.func"() <{function_type = (tensor<3x3x2x4xf32>, tensor<2x8x8x2xf32>) -> tensor<3x3x2x4xf32>, res_attrs = [{jax.result_info = "result"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg1: tensor<3x3x2x4xf32>, %arg2: tensor<2x8x8x2xf32>):
    %3 = "stablehlo.convolution"(%arg2, %arg1) <{batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1, 1>, padding = dense<1> : tensor<2x2xi64>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>], rhs_dilation = array<i64: 1, 1>, window_reversal = array<i1: false, false>, window_strides = array<i64: 1, 1>}> : (tensor<2x8x8x2xf32>, tensor<3x3x2x4xf32>) -> tensor<2x8x8x4xf32>
    %4 = "func.call"(%3) <{callee = @relu}> : (tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
    %5 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %6 = "stablehlo.broadcast_in_dim"(%5) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x8x8x4xf32>
    %7 = "stablehlo.compare"(%3, %6) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction GT>}> : (tensor<2x8x8x4xf32>, tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xi1>
    %8 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %9 = "stablehlo.broadcast_in_dim"(%8) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x4x4xf32>
    %10 = "stablehlo.constant"() <{value = dense<0xFF800000> : tensor<f32>}> : () -> tensor<f32>
    %11 = "stablehlo.pad"(%4, %10) <{edge_padding_high = array<i64: 0, 0, 0, 0>, edge_padding_low = array<i64: 0, 0, 0, 0>, interior_padding = array<i64: 0, 0, 0, 0>}> : (tensor<2x8x8x4xf32>, tensor<f32>) -> tensor<2x8x8x4xf32>
    %12 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %13 = "stablehlo.select_and_scatter"(%11, %9, %12) <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
    ^bb0(%arg5: tensor<f32>, %arg6: tensor<f32>):
      %20 = "stablehlo.compare"(%arg5, %arg6) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction GE>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      "stablehlo.return"(%20) : (tensor<i1>) -> ()
    }, {
    ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>):
      %19 = "stablehlo.add"(%arg3, %arg4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%19) : (tensor<f32>) -> ()
    }) : (tensor<2x8x8x4xf32>, tensor<2x4x4x4xf32>, tensor<f32>) -> tensor<2x8x8x4xf32>
    %14 = "stablehlo.slice"(%13) <{limit_indices = array<i64: 2, 8, 8, 4>, start_indices = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>}> : (tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
    %15 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %16 = "stablehlo.broadcast_in_dim"(%15) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x8x8x4xf32>
    %17 = "stablehlo.select"(%7, %14, %16) : (tensor<2x8x8x4xi1>, tensor<2x8x8x4xf32>, tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
    %18 = "stablehlo.convolution"(%arg2, %17) <{batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<[f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f]>, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1, 1>, padding = dense<1> : tensor<2x2xi64>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>], rhs_dilation = array<i64: 1, 1>, window_reversal = array<i1: false, false>, window_strides = array<i64: 1, 1>}> : (tensor<2x8x8x2xf32>, tensor<2x8x8x4xf32>) -> tensor<3x3x2x4xf32>
    "func.return"(%18) : (tensor<3x3x2x4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>, sym_name = "relu", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<2x8x8x4xf32>):
    %0 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x8x8x4xf32>
    %2 = "stablehlo.maximum"(%arg0, %1) : (tensor<2x8x8x4xf32>, tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
    "func.return"(%2) : (tensor<2x8x8x4xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

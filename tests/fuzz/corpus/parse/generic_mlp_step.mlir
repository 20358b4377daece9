"builtin.module"() <{sym_name = "jit_mlp_step"}> ({
  "func.func"() <{function_type = (tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>, tensor<2x8xf32>, tensor<2x4xf32>) -> (tensor<f32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1][0][0]"}, {jax.result_info = "result[1][0][1]"}, {jax.result_info = "result[1][1][0]"}, {jax.result_info = "result[1][1][1]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg13: tensor<8x16xf32>, %arg14: tensor<16xf32>, %arg15: tensor<16x4xf32>, %arg16: tensor<4xf32>, %arg17: tensor<2x8xf32>, %arg18: tensor<2x4xf32>):
    %32 = "stablehlo.dot_general"(%arg17, %arg13) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
    %33 = "stablehlo.broadcast_in_dim"(%arg14) <{broadcast_dimensions = array<i64: 1>}> : (tensor<16xf32>) -> tensor<1x16xf32>
    %34 = "stablehlo.broadcast_in_dim"(%33) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x16xf32>) -> tensor<2x16xf32>
    %35 = "stablehlo.add"(%32, %34) : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
    %36 = "func.call"(%35) <{callee = @relu}> : (tensor<2x16xf32>) -> tensor<2x16xf32>
    %37 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %38 = "stablehlo.broadcast_in_dim"(%37) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x16xf32>
    %39 = "stablehlo.compare"(%35, %38) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction GT>}> : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xi1>
    %40 = "stablehlo.dot_general"(%36, %arg15) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x16xf32>, tensor<16x4xf32>) -> tensor<2x4xf32>
    %41 = "stablehlo.broadcast_in_dim"(%arg16) <{broadcast_dimensions = array<i64: 1>}> : (tensor<4xf32>) -> tensor<1x4xf32>
    %42 = "stablehlo.broadcast_in_dim"(%41) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x4xf32>) -> tensor<2x4xf32>
    %43 = "stablehlo.add"(%40, %42) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %44:3 = "func.call"(%43) <{callee = @log_softmax}> : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x1xf32>)
    %45 = "stablehlo.multiply"(%44#0, %arg18) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %46 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %47 = "stablehlo.reduce"(%45, %46) <{dimensions = array<i64: 1>}> ({
    ^bb0(%arg29: tensor<f32>, %arg30: tensor<f32>):
      %100 = "stablehlo.add"(%arg29, %arg30) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%100) : (tensor<f32>) -> ()
    }) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2xf32>
    %48 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %49 = "stablehlo.reduce"(%47, %48) <{dimensions = array<i64: 0>}> ({
    ^bb0(%arg27: tensor<f32>, %arg28: tensor<f32>):
      %99 = "stablehlo.add"(%arg27, %arg28) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%99) : (tensor<f32>) -> ()
    }) : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
    %50 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %51 = "stablehlo.divide"(%49, %50) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %52 = "stablehlo.negate"(%51) : (tensor<f32>) -> tensor<f32>
    %53 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %54 = "stablehlo.negate"(%53) : (tensor<f32>) -> tensor<f32>
    %55 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %56 = "stablehlo.divide"(%54, %55) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %57 = "stablehlo.broadcast_in_dim"(%56) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2xf32>
    %58 = "stablehlo.broadcast_in_dim"(%57) <{broadcast_dimensions = array<i64: 0>}> : (tensor<2xf32>) -> tensor<2x4xf32>
    %59 = "stablehlo.multiply"(%58, %arg18) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %60 = "func.call"(%44#1, %44#2, %59) <{callee = @log_softmax_0}> : (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %61 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %62 = "stablehlo.reduce"(%60, %61) <{dimensions = array<i64: 0>}> ({
    ^bb0(%arg25: tensor<f32>, %arg26: tensor<f32>):
      %98 = "stablehlo.add"(%arg25, %arg26) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%98) : (tensor<f32>) -> ()
    }) : (tensor<2x4xf32>, tensor<f32>) -> tensor<4xf32>
    %63 = "stablehlo.reshape"(%62) : (tensor<4xf32>) -> tensor<1x4xf32>
    %64 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %65 = "stablehlo.reduce"(%63, %64) <{dimensions = array<i64: 0>}> ({
    ^bb0(%arg23: tensor<f32>, %arg24: tensor<f32>):
      %97 = "stablehlo.add"(%arg23, %arg24) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%97) : (tensor<f32>) -> ()
    }) : (tensor<1x4xf32>, tensor<f32>) -> tensor<4xf32>
    %66 = "stablehlo.dot_general"(%60, %36) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x4xf32>, tensor<2x16xf32>) -> tensor<4x16xf32>
    %67 = "stablehlo.transpose"(%66) <{permutation = array<i64: 1, 0>}> : (tensor<4x16xf32>) -> tensor<16x4xf32>
    %68 = "stablehlo.dot_general"(%60, %arg15) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x4xf32>, tensor<16x4xf32>) -> tensor<2x16xf32>
    %69 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %70 = "stablehlo.broadcast_in_dim"(%69) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x16xf32>
    %71 = "stablehlo.select"(%39, %68, %70) : (tensor<2x16xi1>, tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
    %72 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %73 = "stablehlo.reduce"(%71, %72) <{dimensions = array<i64: 0>}> ({
    ^bb0(%arg21: tensor<f32>, %arg22: tensor<f32>):
      %96 = "stablehlo.add"(%arg21, %arg22) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%96) : (tensor<f32>) -> ()
    }) : (tensor<2x16xf32>, tensor<f32>) -> tensor<16xf32>
    %74 = "stablehlo.reshape"(%73) : (tensor<16xf32>) -> tensor<1x16xf32>
    %75 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %76 = "stablehlo.reduce"(%74, %75) <{dimensions = array<i64: 0>}> ({
    ^bb0(%arg19: tensor<f32>, %arg20: tensor<f32>):
      %95 = "stablehlo.add"(%arg19, %arg20) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%95) : (tensor<f32>) -> ()
    }) : (tensor<1x16xf32>, tensor<f32>) -> tensor<16xf32>
    %77 = "stablehlo.dot_general"(%71, %arg17) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x16xf32>, tensor<2x8xf32>) -> tensor<16x8xf32>
    %78 = "stablehlo.transpose"(%77) <{permutation = array<i64: 1, 0>}> : (tensor<16x8xf32>) -> tensor<8x16xf32>
    %79 = "stablehlo.constant"() <{value = dense<0.00999999977> : tensor<f32>}> : () -> tensor<f32>
    %80 = "stablehlo.broadcast_in_dim"(%79) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<8x16xf32>
    %81 = "stablehlo.multiply"(%80, %78) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    %82 = "stablehlo.subtract"(%arg13, %81) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    %83 = "stablehlo.constant"() <{value = dense<0.00999999977> : tensor<f32>}> : () -> tensor<f32>
    %84 = "stablehlo.broadcast_in_dim"(%83) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16xf32>
    %85 = "stablehlo.multiply"(%84, %76) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
    %86 = "stablehlo.subtract"(%arg14, %85) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
    %87 = "stablehlo.constant"() <{value = dense<0.00999999977> : tensor<f32>}> : () -> tensor<f32>
    %88 = "stablehlo.broadcast_in_dim"(%87) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<16x4xf32>
    %89 = "stablehlo.multiply"(%88, %67) : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    %90 = "stablehlo.subtract"(%arg15, %89) : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    %91 = "stablehlo.constant"() <{value = dense<0.00999999977> : tensor<f32>}> : () -> tensor<f32>
    %92 = "stablehlo.broadcast_in_dim"(%91) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %93 = "stablehlo.multiply"(%92, %65) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %94 = "stablehlo.subtract"(%arg16, %93) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%52, %82, %86, %90, %94) : (tensor<f32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2x16xf32>) -> tensor<2x16xf32>, sym_name = "relu", sym_visibility = "private"}> ({
  ^bb0(%arg12: tensor<2x16xf32>):
    %29 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %30 = "stablehlo.broadcast_in_dim"(%29) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x16xf32>
    %31 = "stablehlo.maximum"(%arg12, %30) : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
    "func.return"(%31) : (tensor<2x16xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x1xf32>), sym_name = "log_softmax", sym_visibility = "private"}> ({
  ^bb0(%arg7: tensor<2x4xf32>):
    %12 = "stablehlo.constant"() <{value = dense<0xFF800000> : tensor<f32>}> : () -> tensor<f32>
    %13 = "stablehlo.reduce"(%arg7, %12) <{dimensions = array<i64: 1>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %28 = "stablehlo.maximum"(%arg10, %arg11) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%28) : (tensor<f32>) -> ()
    }) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2xf32>
    %14 = "stablehlo.constant"() <{value = dense<0xFF800000> : tensor<f32>}> : () -> tensor<f32>
    %15 = "stablehlo.broadcast_in_dim"(%14) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2xf32>
    %16 = "stablehlo.maximum"(%15, %13) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %17 = "stablehlo.broadcast_in_dim"(%16) <{broadcast_dimensions = array<i64: 0>}> : (tensor<2xf32>) -> tensor<2x1xf32>
    %18 = "stablehlo.broadcast_in_dim"(%17) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x1xf32>) -> tensor<2x4xf32>
    %19 = "stablehlo.subtract"(%arg7, %18) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %20 = "stablehlo.exponential"(%19) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %21 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %22 = "stablehlo.reduce"(%20, %21) <{dimensions = array<i64: 1>}> ({
    ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
      %27 = "stablehlo.add"(%arg8, %arg9) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%27) : (tensor<f32>) -> ()
    }) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2xf32>
    %23 = "stablehlo.broadcast_in_dim"(%22) <{broadcast_dimensions = array<i64: 0>}> : (tensor<2xf32>) -> tensor<2x1xf32>
    %24 = "stablehlo.log"(%23) : (tensor<2x1xf32>) -> tensor<2x1xf32>
    %25 = "stablehlo.broadcast_in_dim"(%24) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x1xf32>) -> tensor<2x4xf32>
    %26 = "stablehlo.subtract"(%19, %25) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    "func.return"(%26, %20, %23) : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x1xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>, sym_name = "log_softmax_0", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<2x4xf32>, %arg1: tensor<2x1xf32>, %arg2: tensor<2x4xf32>):
    %0 = "stablehlo.negate"(%arg2) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %1 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %2 = "stablehlo.reduce"(%0, %1) <{dimensions = array<i64: 1>}> ({
    ^bb0(%arg5: tensor<f32>, %arg6: tensor<f32>):
      %11 = "stablehlo.add"(%arg5, %arg6) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%11) : (tensor<f32>) -> ()
    }) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2xf32>
    %3 = "stablehlo.reshape"(%2) : (tensor<2xf32>) -> tensor<2x1xf32>
    %4 = "stablehlo.divide"(%3, %arg1) : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
    %5 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %6 = "stablehlo.reduce"(%4, %5) <{dimensions = array<i64: 1>}> ({
    ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>):
      %10 = "stablehlo.add"(%arg3, %arg4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%10) : (tensor<f32>) -> ()
    }) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2xf32>
    %7 = "stablehlo.broadcast_in_dim"(%6) <{broadcast_dimensions = array<i64: 0>}> : (tensor<2xf32>) -> tensor<2x4xf32>
    %8 = "stablehlo.multiply"(%7, %arg0) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %9 = "stablehlo.add"(%arg2, %8) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    "func.return"(%9) : (tensor<2x4xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

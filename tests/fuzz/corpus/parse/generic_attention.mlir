"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<f32>, tensor<2x4x8xf32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg21: tensor<2x4x8xf32>, %arg22: tensor<2x4x8xf32>, %arg23: tensor<2x4x8xf32>):
    %53 = "stablehlo.dot_general"(%arg21, %arg22) <{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [2]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
    %54 = "stablehlo.constant"() <{value = dense<8.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %55 = "stablehlo.broadcast_in_dim"(%54) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x4xf32>
    %56 = "stablehlo.divide"(%53, %55) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %57 = "stablehlo.constant"() <{value = dense<0xFF800000> : tensor<f32>}> : () -> tensor<f32>
    %58 = "stablehlo.reduce"(%56, %57) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg40: tensor<f32>, %arg41: tensor<f32>):
      %153 = "stablehlo.maximum"(%arg40, %arg41) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%153) : (tensor<f32>) -> ()
    }) : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %59 = "stablehlo.constant"() <{value = dense<0xFF800000> : tensor<f32>}> : () -> tensor<f32>
    %60 = "stablehlo.broadcast_in_dim"(%59) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4xf32>
    %61 = "stablehlo.maximum"(%60, %58) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %62 = "stablehlo.broadcast_in_dim"(%61) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %63 = "stablehlo.broadcast_in_dim"(%62) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %64 = "stablehlo.subtract"(%56, %63) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %65 = "stablehlo.exponential"(%64) : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %66 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %67 = "stablehlo.reduce"(%65, %66) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg38: tensor<f32>, %arg39: tensor<f32>):
      %152 = "stablehlo.add"(%arg38, %arg39) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%152) : (tensor<f32>) -> ()
    }) : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %68 = "stablehlo.broadcast_in_dim"(%67) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %69 = "stablehlo.broadcast_in_dim"(%68) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %70 = "stablehlo.divide"(%65, %69) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %71 = "stablehlo.multiply"(%68, %68) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %72 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %73 = "stablehlo.broadcast_in_dim"(%72) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %74 = "stablehlo.divide"(%73, %71) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %75 = "stablehlo.dot_general"(%70, %arg23) <{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %76 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %77 = "stablehlo.reduce"(%75, %76) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg36: tensor<f32>, %arg37: tensor<f32>):
      %151 = "stablehlo.add"(%arg36, %arg37) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%151) : (tensor<f32>) -> ()
    }) : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %78 = "stablehlo.broadcast_in_dim"(%77) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %79 = "stablehlo.constant"() <{value = dense<8.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %80 = "stablehlo.broadcast_in_dim"(%79) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %81 = "stablehlo.divide"(%78, %80) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %82 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %83:4 = "func.call"(%75, %82) <{callee = @_var}> : (tensor<2x4x8xf32>, tensor<i32>) -> (tensor<2x4x1xf32>, tensor<2x4x8xf32>, tensor<f32>, tensor<i1>)
    %84 = "stablehlo.broadcast_in_dim"(%81) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %85 = "stablehlo.subtract"(%75, %84) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %86 = "stablehlo.constant"() <{value = dense<9.99999974E-6> : tensor<f32>}> : () -> tensor<f32>
    %87 = "stablehlo.broadcast_in_dim"(%86) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %88 = "stablehlo.add"(%83#0, %87) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %89 = "stablehlo.sqrt"(%88) : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %90 = "stablehlo.constant"() <{value = dense<5.000000e-01> : tensor<f32>}> : () -> tensor<f32>
    %91 = "stablehlo.broadcast_in_dim"(%90) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %92 = "stablehlo.divide"(%91, %89) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %93 = "stablehlo.broadcast_in_dim"(%89) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %94 = "stablehlo.divide"(%85, %93) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %95 = "stablehlo.multiply"(%89, %89) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %96 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %97 = "stablehlo.broadcast_in_dim"(%96) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %98 = "stablehlo.divide"(%97, %95) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %99 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %100 = "stablehlo.reduce"(%94, %99) <{dimensions = array<i64: 0, 1, 2>}> ({
    ^bb0(%arg34: tensor<f32>, %arg35: tensor<f32>):
      %150 = "stablehlo.add"(%arg34, %arg35) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%150) : (tensor<f32>) -> ()
    }) : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<f32>
    %101 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %102 = "stablehlo.broadcast_in_dim"(%101) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x8xf32>
    %103 = "stablehlo.broadcast_in_dim"(%98) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %104 = "stablehlo.multiply"(%102, %103) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %105 = "stablehlo.multiply"(%104, %85) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %106 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %107 = "stablehlo.reduce"(%105, %106) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg32: tensor<f32>, %arg33: tensor<f32>):
      %149 = "stablehlo.add"(%arg32, %arg33) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%149) : (tensor<f32>) -> ()
    }) : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %108 = "stablehlo.reshape"(%107) : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %109 = "stablehlo.negate"(%108) : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %110 = "stablehlo.broadcast_in_dim"(%89) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %111 = "stablehlo.divide"(%102, %110) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %112 = "stablehlo.multiply"(%109, %92) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %113 = "stablehlo.negate"(%111) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %114 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %115 = "stablehlo.reduce"(%113, %114) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg30: tensor<f32>, %arg31: tensor<f32>):
      %148 = "stablehlo.add"(%arg30, %arg31) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%148) : (tensor<f32>) -> ()
    }) : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %116 = "stablehlo.reshape"(%115) : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %117 = "func.call"(%83#1, %83#2, %83#3, %112) <{callee = @_var_0}> : (tensor<2x4x8xf32>, tensor<f32>, tensor<i1>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %118 = "stablehlo.add"(%111, %117) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %119 = "stablehlo.constant"() <{value = dense<8.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %120 = "stablehlo.broadcast_in_dim"(%119) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %121 = "stablehlo.divide"(%116, %120) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %122 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %123 = "stablehlo.reduce"(%121, %122) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg28: tensor<f32>, %arg29: tensor<f32>):
      %147 = "stablehlo.add"(%arg28, %arg29) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%147) : (tensor<f32>) -> ()
    }) : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %124 = "stablehlo.broadcast_in_dim"(%123) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x8xf32>
    %125 = "stablehlo.add"(%118, %124) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %126 = "stablehlo.dot_general"(%125, %arg23) <{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [2]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
    %127 = "stablehlo.broadcast_in_dim"(%74) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %128 = "stablehlo.multiply"(%126, %127) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %129 = "stablehlo.multiply"(%128, %65) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %130 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %131 = "stablehlo.reduce"(%129, %130) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg26: tensor<f32>, %arg27: tensor<f32>):
      %146 = "stablehlo.add"(%arg26, %arg27) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%146) : (tensor<f32>) -> ()
    }) : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %132 = "stablehlo.reshape"(%131) : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %133 = "stablehlo.negate"(%132) : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %134 = "stablehlo.broadcast_in_dim"(%68) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %135 = "stablehlo.divide"(%126, %134) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %136 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %137 = "stablehlo.reduce"(%133, %136) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      %145 = "stablehlo.add"(%arg24, %arg25) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%145) : (tensor<f32>) -> ()
    }) : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %138 = "stablehlo.broadcast_in_dim"(%137) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x4xf32>
    %139 = "stablehlo.add"(%135, %138) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %140 = "stablehlo.multiply"(%139, %65) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %141 = "stablehlo.constant"() <{value = dense<8.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %142 = "stablehlo.broadcast_in_dim"(%141) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x4xf32>
    %143 = "stablehlo.divide"(%140, %142) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %144 = "stablehlo.dot_general"(%143, %arg22) <{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    "func.return"(%100, %144) : (tensor<f32>, tensor<2x4x8xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2x4x8xf32>, tensor<i32>) -> (tensor<2x4x1xf32>, tensor<2x4x8xf32>, tensor<f32>, tensor<i1>), sym_name = "_var", sym_visibility = "private"}> ({
  ^bb0(%arg15: tensor<2x4x8xf32>, %arg16: tensor<i32>):
    %27 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %28 = "stablehlo.reduce"(%arg15, %27) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg19: tensor<f32>, %arg20: tensor<f32>):
      %52 = "stablehlo.add"(%arg19, %arg20) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%52) : (tensor<f32>) -> ()
    }) : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %29 = "stablehlo.broadcast_in_dim"(%28) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %30 = "stablehlo.constant"() <{value = dense<8.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %31 = "stablehlo.broadcast_in_dim"(%30) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %32 = "stablehlo.divide"(%29, %31) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %33 = "stablehlo.broadcast_in_dim"(%32) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %34 = "stablehlo.subtract"(%arg15, %33) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %35 = "chlo.square"(%34) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %36 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %37 = "stablehlo.broadcast_in_dim"(%36) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x8xf32>
    %38 = "stablehlo.multiply"(%37, %34) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %39 = "stablehlo.convert"(%arg16) : (tensor<i32>) -> tensor<f32>
    %40 = "stablehlo.constant"() <{value = dense<8.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %41 = "stablehlo.subtract"(%40, %39) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %42 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %43 = "stablehlo.reduce"(%35, %42) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg17: tensor<f32>, %arg18: tensor<f32>):
      %51 = "stablehlo.add"(%arg17, %arg18) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%51) : (tensor<f32>) -> ()
    }) : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %44 = "stablehlo.broadcast_in_dim"(%43) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %45 = "stablehlo.broadcast_in_dim"(%41) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %46 = "stablehlo.divide"(%44, %45) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %47 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %48 = "stablehlo.compare"(%41, %47) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction GT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %49 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
    %50 = "func.call"(%48, %46, %49) <{callee = @_where}> : (tensor<i1>, tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    "func.return"(%50, %38, %41, %48) : (tensor<2x4x1xf32>, tensor<2x4x8xf32>, tensor<f32>, tensor<i1>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<i1>, tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>, sym_name = "_where", sym_visibility = "private"}> ({
  ^bb0(%arg12: tensor<i1>, %arg13: tensor<2x4x1xf32>, %arg14: tensor<f32>):
    %24 = "stablehlo.convert"(%arg14) : (tensor<f32>) -> tensor<f32>
    %25 = "stablehlo.broadcast_in_dim"(%24) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %26 = "stablehlo.select"(%arg12, %arg13, %25) : (tensor<i1>, tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    "func.return"(%26) : (tensor<2x4x1xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2x4x8xf32>, tensor<f32>, tensor<i1>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>, sym_name = "_var_0", sym_visibility = "private"}> ({
  ^bb0(%arg2: tensor<2x4x8xf32>, %arg3: tensor<f32>, %arg4: tensor<i1>, %arg5: tensor<2x4x1xf32>):
    %3 = "func.call"(%arg4, %arg5) <{callee = @_where_1}> : (tensor<i1>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %4 = "stablehlo.broadcast_in_dim"(%arg3) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %5 = "stablehlo.divide"(%3, %4) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %6 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %7 = "stablehlo.reduce"(%5, %6) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %23 = "stablehlo.add"(%arg10, %arg11) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%23) : (tensor<f32>) -> ()
    }) : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %8 = "stablehlo.broadcast_in_dim"(%7) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x8xf32>
    %9 = "stablehlo.multiply"(%8, %arg2) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %10 = "stablehlo.negate"(%9) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %11 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %12 = "stablehlo.reduce"(%10, %11) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
      %22 = "stablehlo.add"(%arg8, %arg9) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%22) : (tensor<f32>) -> ()
    }) : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %13 = "stablehlo.reshape"(%12) : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %14 = "stablehlo.constant"() <{value = dense<8.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %15 = "stablehlo.broadcast_in_dim"(%14) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %16 = "stablehlo.divide"(%13, %15) : (tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %17 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %18 = "stablehlo.reduce"(%16, %17) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg6: tensor<f32>, %arg7: tensor<f32>):
      %21 = "stablehlo.add"(%arg6, %arg7) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%21) : (tensor<f32>) -> ()
    }) : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %19 = "stablehlo.broadcast_in_dim"(%18) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<2x4xf32>) -> tensor<2x4x8xf32>
    %20 = "stablehlo.add"(%9, %19) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    "func.return"(%20) : (tensor<2x4x8xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<i1>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>, sym_name = "_where_1", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<i1>, %arg1: tensor<2x4x1xf32>):
    %0 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x4x1xf32>
    %2 = "stablehlo.select"(%arg0, %arg1, %1) : (tensor<i1>, tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    "func.return"(%2) : (tensor<2x4x1xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

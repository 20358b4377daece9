"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<7xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4x4xf32>, tensor<2xf32>, tensor<2xi32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3x3xf32>, tensor<4xf32>, tensor<4xi1>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}, {jax.result_info = "result[2]"}, {jax.result_info = "result[3]"}, {jax.result_info = "result[4]"}, {jax.result_info = "result[5]"}, {jax.result_info = "result[6][0]"}, {jax.result_info = "result[6][1]"}, {jax.result_info = "result[7]"}, {jax.result_info = "result[8]"}, {jax.result_info = "result[9]"}, {jax.result_info = "result[10]"}, {jax.result_info = "result[11]"}, {jax.result_info = "result[12]"}, {jax.result_info = "result[13]"}, {jax.result_info = "result[14]"}, {jax.result_info = "result[15]"}, {jax.result_info = "result[16]"}, {jax.result_info = "result[17]"}, {jax.result_info = "result[18]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg15: tensor<4xf32>):
    %64 = "func.call"(%arg15) <{callee = @cumsum}> : (tensor<4xf32>) -> tensor<4xf32>
    %65 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %66 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %67 = "func.call"(%arg15, %65, %66) <{callee = @clip}> : (tensor<4xf32>, tensor<i32>, tensor<i32>) -> tensor<4xf32>
    %68 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %69 = "func.call"(%arg15, %68) <{callee = @_pad}> : (tensor<4xf32>, tensor<i32>) -> tensor<7xf32>
    %70 = "func.call"(%arg15) <{callee = @_flip}> : (tensor<4xf32>) -> tensor<4xf32>
    %71 = "stablehlo.concatenate"(%arg15, %arg15) <{dimension = 0 : i64}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
    %72 = "stablehlo.broadcast_in_dim"(%arg15) <{broadcast_dimensions = array<i64: 0>}> : (tensor<4xf32>) -> tensor<4x1xf32>
    %73 = "stablehlo.broadcast_in_dim"(%arg15) <{broadcast_dimensions = array<i64: 1>}> : (tensor<4xf32>) -> tensor<1x4xf32>
    %74 = "stablehlo.broadcast_in_dim"(%72) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<4x1xf32>) -> tensor<4x4xf32>
    %75 = "stablehlo.broadcast_in_dim"(%73) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x4xf32>) -> tensor<4x4xf32>
    %76 = "stablehlo.multiply"(%74, %75) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %77 = "func.call"(%76) <{callee = @tril}> : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %78:2 = "chlo.top_k"(%arg15) <{k = 2 : i64}> : (tensor<4xf32>) -> (tensor<2xf32>, tensor<2xi32>)
    %79 = "chlo.erf"(%arg15) : (tensor<4xf32>) -> tensor<4xf32>
    %80 = "stablehlo.constant"() <{value = dense<1.000000e-01> : tensor<f32>}> : () -> tensor<f32>
    %81 = "stablehlo.broadcast_in_dim"(%80) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %82 = "stablehlo.multiply"(%arg15, %81) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %83 = "chlo.erf_inv"(%82) : (tensor<4xf32>) -> tensor<4xf32>
    %84 = "chlo.lgamma"(%arg15) : (tensor<4xf32>) -> tensor<4xf32>
    %85 = "chlo.digamma"(%arg15) : (tensor<4xf32>) -> tensor<4xf32>
    %86 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> : () -> tensor<3x3xi32>
    %87 = "stablehlo.iota"() <{iota_dimension = 1 : i64}> : () -> tensor<3x3xi32>
    %88 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %89 = "stablehlo.broadcast_in_dim"(%88) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<3x3xi32>
    %90 = "stablehlo.add"(%86, %89) : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi32>
    %91 = "stablehlo.compare"(%90, %87) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
    %92 = "stablehlo.convert"(%91) : (tensor<3x3xi1>) -> tensor<3x3xf32>
    %93 = "func.call"(%92) <{callee = @cholesky}> : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %94 = "func.call"(%arg15) <{callee = @round}> : (tensor<4xf32>) -> tensor<4xf32>
    %95 = "stablehlo.is_finite"(%arg15) : (tensor<4xf32>) -> tensor<4xi1>
    %96 = "stablehlo.optimization_barrier"(%arg15) : (tensor<4xf32>) -> tensor<4xf32>
    %97 = "chlo.sinh"(%arg15) : (tensor<4xf32>) -> tensor<4xf32>
    %98 = "chlo.atan"(%arg15) : (tensor<4xf32>) -> tensor<4xf32>
    %99 = "stablehlo.constant"() <{value = dense<2.500000e+00> : tensor<f32>}> : () -> tensor<f32>
    %100 = "stablehlo.broadcast_in_dim"(%99) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %101 = "stablehlo.power"(%arg15, %100) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %102 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %103 = "func.call"(%arg15, %102) <{callee = @remainder}> : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    "func.return"(%64, %67, %69, %70, %71, %77, %78#0, %78#1, %79, %83, %84, %85, %93, %94, %95, %96, %97, %98, %101, %103) : (tensor<4xf32>, tensor<4xf32>, tensor<7xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4x4xf32>, tensor<2xf32>, tensor<2xi32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3x3xf32>, tensor<4xf32>, tensor<4xi1>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "cumsum", sym_visibility = "private"}> ({
  ^bb0(%arg14: tensor<4xf32>):
    %63 = "func.call"(%arg14) <{callee = @cumsum_0}> : (tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%63) : (tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "cumsum_0", sym_visibility = "private"}> ({
  ^bb0(%arg11: tensor<4xf32>):
    %59 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %60 = "stablehlo.broadcast_in_dim"(%59) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<f32>
    %61 = "stablehlo.reduce_window"(%arg11, %60) <{base_dilations = array<i64: 1>, padding = dense<[[3, 0]]> : tensor<1x2xi64>, window_dilations = array<i64: 1>, window_dimensions = array<i64: 4>, window_strides = array<i64: 1>}> ({
    ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
      %62 = "stablehlo.add"(%arg12, %arg13) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%62) : (tensor<f32>) -> ()
    }) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    "func.return"(%61) : (tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4xf32>, tensor<i32>, tensor<i32>) -> tensor<4xf32>, sym_name = "clip", sym_visibility = "private"}> ({
  ^bb0(%arg8: tensor<4xf32>, %arg9: tensor<i32>, %arg10: tensor<i32>):
    %53 = "stablehlo.convert"(%arg9) : (tensor<i32>) -> tensor<f32>
    %54 = "stablehlo.broadcast_in_dim"(%53) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %55 = "stablehlo.maximum"(%54, %arg8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %56 = "stablehlo.convert"(%arg10) : (tensor<i32>) -> tensor<f32>
    %57 = "stablehlo.broadcast_in_dim"(%56) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %58 = "stablehlo.minimum"(%57, %55) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%58) : (tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4xf32>, tensor<i32>) -> tensor<7xf32>, sym_name = "_pad", sym_visibility = "private"}> ({
  ^bb0(%arg6: tensor<4xf32>, %arg7: tensor<i32>):
    %51 = "stablehlo.convert"(%arg7) : (tensor<i32>) -> tensor<f32>
    %52 = "stablehlo.pad"(%arg6, %51) <{edge_padding_high = array<i64: 2>, edge_padding_low = array<i64: 1>, interior_padding = array<i64: 0>}> : (tensor<4xf32>, tensor<f32>) -> tensor<7xf32>
    "func.return"(%52) : (tensor<7xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "_flip", sym_visibility = "private"}> ({
  ^bb0(%arg5: tensor<4xf32>):
    %50 = "stablehlo.reverse"(%arg5) <{dimensions = array<i64: 0>}> : (tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%50) : (tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4x4xf32>) -> tensor<4x4xf32>, sym_name = "tril", sym_visibility = "private"}> ({
  ^bb0(%arg4: tensor<4x4xf32>):
    %41 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> : () -> tensor<4x4xi32>
    %42 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %43 = "stablehlo.broadcast_in_dim"(%42) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<4x4xi32>
    %44 = "stablehlo.add"(%41, %43) : (tensor<4x4xi32>, tensor<4x4xi32>) -> tensor<4x4xi32>
    %45 = "stablehlo.iota"() <{iota_dimension = 1 : i64}> : () -> tensor<4x4xi32>
    %46 = "stablehlo.compare"(%44, %45) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction GE>}> : (tensor<4x4xi32>, tensor<4x4xi32>) -> tensor<4x4xi1>
    %47 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %48 = "stablehlo.broadcast_in_dim"(%47) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4x4xf32>
    %49 = "stablehlo.select"(%46, %arg4, %48) : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    "func.return"(%49) : (tensor<4x4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<3x3xf32>) -> tensor<3x3xf32>, sym_name = "cholesky", sym_visibility = "private"}> ({
  ^bb0(%arg3: tensor<3x3xf32>):
    %18 = "stablehlo.transpose"(%arg3) <{permutation = array<i64: 1, 0>}> : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %19 = "stablehlo.add"(%arg3, %18) : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
    %20 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %21 = "stablehlo.broadcast_in_dim"(%20) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3x3xf32>
    %22 = "stablehlo.divide"(%19, %21) : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
    %23:2 = "stablehlo.custom_call"(%22) <{backend_config = "", call_target_name = "lapack_spotrf_ffi", operand_layouts = [dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]}> {mhlo.backend_config = {uplo = 76 : ui8}, mhlo.frontend_attributes = {num_batch_dims = "0"}, sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([k, l], []) {i=3, j=3, k=3, l=3}, custom>} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<i32>)
    %24 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %25 = "stablehlo.broadcast_in_dim"(%24) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<i32>
    %26 = "stablehlo.compare"(%23#1, %25) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %27 = "stablehlo.broadcast_in_dim"(%26) <{broadcast_dimensions = array<i64>}> : (tensor<i1>) -> tensor<1x1xi1>
    %28 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
    %29 = "stablehlo.broadcast_in_dim"(%28) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3x3xf32>
    %30 = "stablehlo.broadcast_in_dim"(%27) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x1xi1>) -> tensor<3x3xi1>
    %31 = "stablehlo.select"(%30, %23#0, %29) : (tensor<3x3xi1>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
    %32 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> : () -> tensor<3x3xi32>
    %33 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %34 = "stablehlo.broadcast_in_dim"(%33) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<3x3xi32>
    %35 = "stablehlo.add"(%32, %34) : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi32>
    %36 = "stablehlo.iota"() <{iota_dimension = 1 : i64}> : () -> tensor<3x3xi32>
    %37 = "stablehlo.compare"(%35, %36) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction GE>}> : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
    %38 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %39 = "stablehlo.broadcast_in_dim"(%38) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3x3xf32>
    %40 = "stablehlo.select"(%37, %31, %39) : (tensor<3x3xi1>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
    "func.return"(%40) : (tensor<3x3xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "round", sym_visibility = "private"}> ({
  ^bb0(%arg2: tensor<4xf32>):
    %17 = "stablehlo.round_nearest_even"(%arg2) : (tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%17) : (tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>, sym_name = "remainder", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<4xf32>, %arg1: tensor<f32>):
    %0 = "stablehlo.convert"(%arg1) : (tensor<f32>) -> tensor<f32>
    %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %2 = "stablehlo.remainder"(%arg0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %4 = "stablehlo.broadcast_in_dim"(%3) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %5 = "stablehlo.compare"(%2, %4) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %6 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %7 = "stablehlo.broadcast_in_dim"(%6) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %8 = "stablehlo.compare"(%2, %7) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %9 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %10 = "stablehlo.compare"(%0, %9) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %11 = "stablehlo.broadcast_in_dim"(%10) <{broadcast_dimensions = array<i64>}> : (tensor<i1>) -> tensor<4xi1>
    %12 = "stablehlo.compare"(%8, %11) <{compare_type = #stablehlo<comparison_type UNSIGNED>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %13 = "stablehlo.and"(%12, %5) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %14 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %15 = "stablehlo.add"(%2, %14) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %16 = "stablehlo.select"(%13, %15, %2) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%16) : (tensor<4xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

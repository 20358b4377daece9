"builtin.module"() <{sym_name = "jit_scanf"}> ({
  "func.func"() <{function_type = (tensor<5xf32>) -> (tensor<f32>, tensor<5xf32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg7: tensor<5xf32>):
    %8 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %9 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %10 = "stablehlo.broadcast_in_dim"(%9) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<5xf32>
    %11 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %12:4 = "stablehlo.while"(%arg7, %11, %8, %10) ({
    ^bb0(%arg12: tensor<5xf32>, %arg13: tensor<i32>, %arg14: tensor<f32>, %arg15: tensor<5xf32>):
      %18 = "stablehlo.constant"() <{value = dense<5> : tensor<i32>}> : () -> tensor<i32>
      %19 = "stablehlo.compare"(%arg13, %18) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
      "stablehlo.return"(%19) : (tensor<i1>) -> ()
    }, {
    ^bb0(%arg8: tensor<5xf32>, %arg9: tensor<i32>, %arg10: tensor<f32>, %arg11: tensor<5xf32>):
      %13 = "func.call"(%arg8, %arg9) <{callee = @dynamic_index_in_dim}> : (tensor<5xf32>, tensor<i32>) -> tensor<f32>
      %14:2 = "func.call"(%arg10, %13) <{callee = @closed_call}> : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
      %15 = "func.call"(%arg11, %14#1, %arg9) <{callee = @dynamic_update_index_in_dim}> : (tensor<5xf32>, tensor<f32>, tensor<i32>) -> tensor<5xf32>
      %16 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
      %17 = "stablehlo.add"(%arg9, %16) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      "stablehlo.return"(%arg8, %17, %14#0, %15) : (tensor<5xf32>, tensor<i32>, tensor<f32>, tensor<5xf32>) -> ()
    }) : (tensor<5xf32>, tensor<i32>, tensor<f32>, tensor<5xf32>) -> (tensor<5xf32>, tensor<i32>, tensor<f32>, tensor<5xf32>)
    "func.return"(%12#2, %12#3) : (tensor<f32>, tensor<5xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<5xf32>, tensor<i32>) -> tensor<f32>, sym_name = "dynamic_index_in_dim", sym_visibility = "private"}> ({
  ^bb0(%arg5: tensor<5xf32>, %arg6: tensor<i32>):
    %6 = "stablehlo.dynamic_slice"(%arg5, %arg6) <{slice_sizes = array<i64: 1>}> : (tensor<5xf32>, tensor<i32>) -> tensor<1xf32>
    %7 = "stablehlo.reshape"(%6) : (tensor<1xf32>) -> tensor<f32>
    "func.return"(%7) : (tensor<f32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>), sym_name = "closed_call", sym_visibility = "private"}> ({
  ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>):
    %2 = "stablehlo.convert"(%arg3) : (tensor<f32>) -> tensor<f32>
    %3 = "stablehlo.add"(%2, %arg4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %4 = "stablehlo.convert"(%arg3) : (tensor<f32>) -> tensor<f32>
    %5 = "stablehlo.multiply"(%4, %arg4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "func.return"(%3, %5) : (tensor<f32>, tensor<f32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<5xf32>, tensor<f32>, tensor<i32>) -> tensor<5xf32>, sym_name = "dynamic_update_index_in_dim", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<5xf32>, %arg1: tensor<f32>, %arg2: tensor<i32>):
    %0 = "stablehlo.broadcast_in_dim"(%arg1) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1xf32>
    %1 = "stablehlo.dynamic_update_slice"(%arg0, %0, %arg2) : (tensor<5xf32>, tensor<1xf32>, tensor<i32>) -> tensor<5xf32>
    "func.return"(%1) : (tensor<5xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

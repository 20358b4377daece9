"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<4x5xf32>, tensor<2xi32>) -> (tensor<2x5xf32>, tensor<4x5xf32>, tensor<2x3xf32>, tensor<4x5xf32>, tensor<4x1xf32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}, {jax.result_info = "result[2]"}, {jax.result_info = "result[3]"}, {jax.result_info = "result[4]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg4: tensor<4x5xf32>, %arg5: tensor<2xi32>):
    %23 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %24 = "stablehlo.broadcast_in_dim"(%23) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<2xi32>
    %25 = "stablehlo.compare"(%arg5, %24) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi1>
    %26 = "stablehlo.constant"() <{value = dense<4> : tensor<i32>}> : () -> tensor<i32>
    %27 = "stablehlo.broadcast_in_dim"(%26) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<2xi32>
    %28 = "stablehlo.add"(%arg5, %27) : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
    %29 = "stablehlo.select"(%25, %28, %arg5) : (tensor<2xi1>, tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
    %30 = "stablehlo.broadcast_in_dim"(%29) <{broadcast_dimensions = array<i64: 0>}> : (tensor<2xi32>) -> tensor<2x1xi32>
    %31 = "stablehlo.gather"(%arg4, %30) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 5>}> : (tensor<4x5xf32>, tensor<2x1xi32>) -> tensor<2x5xf32>
    %32 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %33 = "stablehlo.broadcast_in_dim"(%32) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<2xi32>
    %34 = "stablehlo.compare"(%arg5, %33) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi1>
    %35 = "stablehlo.constant"() <{value = dense<4> : tensor<i32>}> : () -> tensor<i32>
    %36 = "stablehlo.broadcast_in_dim"(%35) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<2xi32>
    %37 = "stablehlo.add"(%arg5, %36) : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
    %38 = "stablehlo.select"(%34, %37, %arg5) : (tensor<2xi1>, tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
    %39 = "stablehlo.broadcast_in_dim"(%38) <{broadcast_dimensions = array<i64: 0>}> : (tensor<2xi32>) -> tensor<2x1xi32>
    %40 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %41 = "stablehlo.broadcast_in_dim"(%40) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x5xf32>
    %42 = "stablehlo.scatter"(%arg4, %39, %41) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
      %52 = "stablehlo.add"(%arg8, %arg9) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%52) : (tensor<f32>) -> ()
    }) : (tensor<4x5xf32>, tensor<2x1xi32>, tensor<2x5xf32>) -> tensor<4x5xf32>
    %43 = "stablehlo.slice"(%arg4) <{limit_indices = array<i64: 3, 5>, start_indices = array<i64: 1, 0>, strides = array<i64: 1, 2>}> : (tensor<4x5xf32>) -> tensor<2x3xf32>
    %44 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %45 = "stablehlo.broadcast_in_dim"(%44) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<1xi32>
    %46 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %47 = "stablehlo.broadcast_in_dim"(%46) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %48 = "stablehlo.scatter"(%arg4, %45, %47) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1]>, unique_indices = true}> ({
    ^bb0(%arg6: tensor<f32>, %arg7: tensor<f32>):
      "stablehlo.return"(%arg7) : (tensor<f32>) -> ()
    }) : (tensor<4x5xf32>, tensor<1xi32>, tensor<4xf32>) -> tensor<4x5xf32>
    %49 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %50 = "stablehlo.broadcast_in_dim"(%49) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<4x1xi32>
    %51 = "func.call"(%arg4, %50) <{callee = @take_along_axis}> : (tensor<4x5xf32>, tensor<4x1xi32>) -> tensor<4x1xf32>
    "func.return"(%31, %42, %43, %48, %51) : (tensor<2x5xf32>, tensor<4x5xf32>, tensor<2x3xf32>, tensor<4x5xf32>, tensor<4x1xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<4x5xf32>, tensor<4x1xi32>) -> tensor<4x1xf32>, sym_name = "take_along_axis", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<4x5xf32>, %arg1: tensor<4x1xi32>):
    %0 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<4x1xi32>
    %2 = "stablehlo.compare"(%arg1, %1) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<4x1xi32>, tensor<4x1xi32>) -> tensor<4x1xi1>
    %3 = "stablehlo.constant"() <{value = dense<5> : tensor<i32>}> : () -> tensor<i32>
    %4 = "stablehlo.broadcast_in_dim"(%3) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<4x1xi32>
    %5 = "stablehlo.add"(%arg1, %4) : (tensor<4x1xi32>, tensor<4x1xi32>) -> tensor<4x1xi32>
    %6 = "stablehlo.select"(%2, %5, %arg1) : (tensor<4x1xi1>, tensor<4x1xi32>, tensor<4x1xi32>) -> tensor<4x1xi32>
    %7 = "stablehlo.reshape"(%6) : (tensor<4x1xi32>) -> tensor<4x1x1xi32>
    %8 = "stablehlo.constant"() <{value = dense<4> : tensor<1xi32>}> : () -> tensor<1xi32>
    %9 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %10 = "stablehlo.broadcast_in_dim"(%9) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<4x1x1xi32>
    %11 = "stablehlo.compare"(%7, %10) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction GE>}> : (tensor<4x1x1xi32>, tensor<4x1x1xi32>) -> tensor<4x1x1xi1>
    %12 = "stablehlo.broadcast_in_dim"(%8) <{broadcast_dimensions = array<i64: 2>}> : (tensor<1xi32>) -> tensor<1x1x1xi32>
    %13 = "stablehlo.broadcast_in_dim"(%12) <{broadcast_dimensions = array<i64: 0, 1, 2>}> : (tensor<1x1x1xi32>) -> tensor<4x1x1xi32>
    %14 = "stablehlo.compare"(%7, %13) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LE>}> : (tensor<4x1x1xi32>, tensor<4x1x1xi32>) -> tensor<4x1x1xi1>
    %15 = "stablehlo.and"(%11, %14) : (tensor<4x1x1xi1>, tensor<4x1x1xi1>) -> tensor<4x1x1xi1>
    %16 = "stablehlo.constant"() <{value = dense<true> : tensor<i1>}> : () -> tensor<i1>
    %17 = "stablehlo.reduce"(%15, %16) <{dimensions = array<i64: 2>}> ({
    ^bb0(%arg2: tensor<i1>, %arg3: tensor<i1>):
      %22 = "stablehlo.and"(%arg2, %arg3) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%22) : (tensor<i1>) -> ()
    }) : (tensor<4x1x1xi1>, tensor<i1>) -> tensor<4x1xi1>
    %18 = "stablehlo.gather"(%arg0, %7) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}> : (tensor<4x5xf32>, tensor<4x1x1xi32>) -> tensor<4x1xf32>
    %19 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
    %20 = "stablehlo.broadcast_in_dim"(%19) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4x1xf32>
    %21 = "stablehlo.select"(%17, %18, %20) : (tensor<4x1xi1>, tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
    "func.return"(%21) : (tensor<4x1xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x5xf32>, %arg1: tensor<2xi32>) -> (tensor<2x5xf32> {jax.result_info = "result[0]"}, tensor<4x5xf32> {jax.result_info = "result[1]"}, tensor<2x3xf32> {jax.result_info = "result[2]"}, tensor<4x5xf32> {jax.result_info = "result[3]"}, tensor<4x1xf32> {jax.result_info = "result[4]"}) {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<2xi32>
    %1 = stablehlo.compare LT, %arg1, %0, SIGNED : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi1>
    %c_0 = stablehlo.constant dense<4> : tensor<i32>
    %2 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<2xi32>
    %3 = stablehlo.add %arg1, %2 : tensor<2xi32>
    %4 = stablehlo.select %1, %3, %arg1 : tensor<2xi1>, tensor<2xi32>
    %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<2xi32>) -> tensor<2x1xi32>
    %6 = "stablehlo.gather"(%arg0, %5) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 5>}> : (tensor<4x5xf32>, tensor<2x1xi32>) -> tensor<2x5xf32>
    %c_1 = stablehlo.constant dense<0> : tensor<i32>
    %7 = stablehlo.broadcast_in_dim %c_1, dims = [] : (tensor<i32>) -> tensor<2xi32>
    %8 = stablehlo.compare LT, %arg1, %7, SIGNED : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi1>
    %c_2 = stablehlo.constant dense<4> : tensor<i32>
    %9 = stablehlo.broadcast_in_dim %c_2, dims = [] : (tensor<i32>) -> tensor<2xi32>
    %10 = stablehlo.add %arg1, %9 : tensor<2xi32>
    %11 = stablehlo.select %8, %10, %arg1 : tensor<2xi1>, tensor<2xi32>
    %12 = stablehlo.broadcast_in_dim %11, dims = [0] : (tensor<2xi32>) -> tensor<2x1xi32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %13 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x5xf32>
    %14 = "stablehlo.scatter"(%arg0, %12, %13) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %21 = stablehlo.add %arg2, %arg3 : tensor<f32>
      stablehlo.return %21 : tensor<f32>
    }) : (tensor<4x5xf32>, tensor<2x1xi32>, tensor<2x5xf32>) -> tensor<4x5xf32>
    %15 = stablehlo.slice %arg0 [1:3, 0:5:2] : (tensor<4x5xf32>) -> tensor<2x3xf32>
    %c_3 = stablehlo.constant dense<1> : tensor<i32>
    %16 = stablehlo.broadcast_in_dim %c_3, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %17 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %18 = "stablehlo.scatter"(%arg0, %16, %17) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1]>, unique_indices = true}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      stablehlo.return %arg3 : tensor<f32>
    }) : (tensor<4x5xf32>, tensor<1xi32>, tensor<4xf32>) -> tensor<4x5xf32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %19 = stablehlo.broadcast_in_dim %c_5, dims = [] : (tensor<i32>) -> tensor<4x1xi32>
    %20 = call @take_along_axis(%arg0, %19) : (tensor<4x5xf32>, tensor<4x1xi32>) -> tensor<4x1xf32>
    return %6, %14, %15, %18, %20 : tensor<2x5xf32>, tensor<4x5xf32>, tensor<2x3xf32>, tensor<4x5xf32>, tensor<4x1xf32>
  }
  func.func private @take_along_axis(%arg0: tensor<4x5xf32>, %arg1: tensor<4x1xi32>) -> tensor<4x1xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<4x1xi32>
    %1 = stablehlo.compare LT, %arg1, %0, SIGNED : (tensor<4x1xi32>, tensor<4x1xi32>) -> tensor<4x1xi1>
    %c_0 = stablehlo.constant dense<5> : tensor<i32>
    %2 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<4x1xi32>
    %3 = stablehlo.add %arg1, %2 : tensor<4x1xi32>
    %4 = stablehlo.select %1, %3, %arg1 : tensor<4x1xi1>, tensor<4x1xi32>
    %5 = stablehlo.reshape %4 : (tensor<4x1xi32>) -> tensor<4x1x1xi32>
    %c_1 = stablehlo.constant dense<4> : tensor<1xi32>
    %c_2 = stablehlo.constant dense<0> : tensor<i32>
    %6 = stablehlo.broadcast_in_dim %c_2, dims = [] : (tensor<i32>) -> tensor<4x1x1xi32>
    %7 = stablehlo.compare GE, %5, %6, SIGNED : (tensor<4x1x1xi32>, tensor<4x1x1xi32>) -> tensor<4x1x1xi1>
    %8 = stablehlo.broadcast_in_dim %c_1, dims = [2] : (tensor<1xi32>) -> tensor<1x1x1xi32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1, 2] : (tensor<1x1x1xi32>) -> tensor<4x1x1xi32>
    %10 = stablehlo.compare LE, %5, %9, SIGNED : (tensor<4x1x1xi32>, tensor<4x1x1xi32>) -> tensor<4x1x1xi1>
    %11 = stablehlo.and %7, %10 : tensor<4x1x1xi1>
    %c_3 = stablehlo.constant dense<true> : tensor<i1>
    %12 = stablehlo.reduce(%11 init: %c_3) applies stablehlo.and across dimensions = [2] : (tensor<4x1x1xi1>, tensor<i1>) -> tensor<4x1xi1>
    %13 = "stablehlo.gather"(%arg0, %5) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}> : (tensor<4x5xf32>, tensor<4x1x1xi32>) -> tensor<4x1xf32>
    %cst = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x1xf32>
    %15 = stablehlo.select %12, %13, %14 : tensor<4x1xi1>, tensor<4x1xf32>
    return %15 : tensor<4x1xf32>
  }
}

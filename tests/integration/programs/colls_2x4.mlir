module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}, {name = "y", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x16xf32>, %arg1: tensor<3x8xi32>) -> (tensor<8x4xf32> {jax.result_info = "result[0]"}, tensor<4x4xf32> {jax.result_info = "result[1]"}, tensor<8x16xf32> {jax.result_info = "result[2]"}, tensor<8x4xf32> {jax.result_info = "result[3]"}, tensor<8x16xf32> {jax.result_info = "result[4]"}, tensor<8x16xf32> {jax.result_info = "result[5]"}, tensor<4x16xf32> {jax.result_info = "result[6]"}, tensor<3x1xi32> {jax.result_info = "result[7]"}, tensor<3x8xi32> {jax.result_info = "result[8]"}, tensor<8xi32> {jax.result_info = "result[9]"}) {
    %0:10 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"x"}, {"y"}]>, <@mesh, [{}, {"x", "y"}]>] out_shardings=[<@mesh, [{"x"}, {}]>, <@mesh, [{}, {}]>, <@mesh, [{"x"}, {}]>, <@mesh, [{"x"}, {"y"}]>, <@mesh, [{"x", "y"}, {}]>, <@mesh, [{"x"}, {"y"}]>, <@mesh, [{}, {"y"}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {"x", "y"}]>, <@mesh, [{"x", "y"}]>] manual_axes={"x", "y"} (%arg2: tensor<4x4xf32>, %arg3: tensor<3x1xi32>) {
      %c = stablehlo.constant dense<4> : tensor<ui32>
      %c_0 = stablehlo.constant dense<2> : tensor<ui32>
      %1 = stablehlo.partition_id : tensor<ui32>
      %2 = stablehlo.divide %1, %c : tensor<ui32>
      %3 = stablehlo.remainder %2, %c_0 : tensor<ui32>
      %4 = stablehlo.convert %3 : (tensor<ui32>) -> tensor<i32>
      %c_1 = stablehlo.constant dense<1> : tensor<ui32>
      %c_2 = stablehlo.constant dense<4> : tensor<ui32>
      %5 = stablehlo.partition_id : tensor<ui32>
      %6 = stablehlo.divide %5, %c_1 : tensor<ui32>
      %7 = stablehlo.remainder %6, %c_2 : tensor<ui32>
      %8 = stablehlo.convert %7 : (tensor<ui32>) -> tensor<i32>
      %9 = "stablehlo.all_reduce"(%arg2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %21 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %21 : tensor<f32>
      }) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %10 = "stablehlo.all_reduce"(%arg2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %21 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %21 : tensor<f32>
      }) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %11 = "stablehlo.all_gather"(%arg2) <{all_gather_dim = 1 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}> : (tensor<4x4xf32>) -> tensor<4x16xf32>
      %12 = "stablehlo.reduce_scatter"(%arg2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, scatter_dimension = 1 : i64, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %21 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %21 : tensor<f32>
      }) : (tensor<4x4xf32>) -> tensor<4x1xf32>
      %13 = "stablehlo.all_to_all"(%arg2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, concat_dimension = 1 : i64, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, split_count = 4 : i64, split_dimension = 0 : i64}> : (tensor<4x4xf32>) -> tensor<1x16xf32>
      %14 = "stablehlo.collective_permute"(%arg2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4]]> : tensor<8x2xi64>}> : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %15 = "stablehlo.all_reduce"(%arg2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4], [1, 5], [2, 6], [3, 7]]> : tensor<4x2xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %21 = stablehlo.maximum %arg4, %arg5 : tensor<f32>
        stablehlo.return %21 : tensor<f32>
      }) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %16 = "stablehlo.all_reduce"(%arg3) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<i32>, %arg5: tensor<i32>):
        %21 = stablehlo.minimum %arg4, %arg5 : tensor<i32>
        stablehlo.return %21 : tensor<i32>
      }) : (tensor<3x1xi32>) -> tensor<3x1xi32>
      %17 = "stablehlo.all_reduce"(%arg3) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4], [1, 5], [2, 6], [3, 7]]> : tensor<4x2xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<i32>, %arg5: tensor<i32>):
        %21 = stablehlo.add %arg4, %arg5 : tensor<i32>
        stablehlo.return %21 : tensor<i32>
      }) : (tensor<3x1xi32>) -> tensor<3x1xi32>
      %c_3 = stablehlo.constant dense<10> : tensor<i32>
      %18 = stablehlo.multiply %4, %c_3 : tensor<i32>
      %19 = stablehlo.add %18, %8 : tensor<i32>
      %20 = stablehlo.reshape %19 : (tensor<i32>) -> tensor<1xi32>
      sdy.return %9, %10, %11, %12, %13, %14, %15, %16, %17, %20 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x16xf32>, tensor<4x1xf32>, tensor<1x16xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<3x1xi32>, tensor<3x1xi32>, tensor<1xi32>
    } : (tensor<8x16xf32>, tensor<3x8xi32>) -> (tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x16xf32>, tensor<8x4xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<3x1xi32>, tensor<3x8xi32>, tensor<8xi32>)
    return %0#0, %0#1, %0#2, %0#3, %0#4, %0#5, %0#6, %0#7, %0#8, %0#9 : tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x16xf32>, tensor<8x4xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<3x1xi32>, tensor<3x8xi32>, tensor<8xi32>
  }
}

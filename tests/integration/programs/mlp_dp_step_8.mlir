module @jit_dp_step attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16xf32>, %arg2: tensor<16x4xf32>, %arg3: tensor<4xf32>, %arg4: tensor<64x8xf32>, %arg5: tensor<64x4xf32>) -> (tensor<8x16xf32> {jax.result_info = "result[0]"}, tensor<16xf32> {jax.result_info = "result[1]"}, tensor<16x4xf32> {jax.result_info = "result[2]"}, tensor<4xf32> {jax.result_info = "result[3]"}, tensor<f32> {jax.result_info = "result[4]"}) {
    %0:5 = sdy.manual_computation(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5) in_shardings=[<@mesh, [{}, {}]>, <@mesh, [{}]>, <@mesh, [{}, {}]>, <@mesh, [{}]>, <@mesh, [{"d"}, {}]>, <@mesh, [{"d"}, {}]>] out_shardings=[<@mesh, [{}, {}]>, <@mesh, [{}]>, <@mesh, [{}, {}]>, <@mesh, [{}]>, <@mesh, []>] manual_axes={"d"} (%arg6: tensor<8x16xf32>, %arg7: tensor<16xf32>, %arg8: tensor<16x4xf32>, %arg9: tensor<4xf32>, %arg10: tensor<8x8xf32>, %arg11: tensor<8x4xf32>) {
      %1 = stablehlo.dot_general %arg10, %arg6, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
      %2 = stablehlo.broadcast_in_dim %arg7, dims = [1] : (tensor<16xf32>) -> tensor<1x16xf32>
      %3 = stablehlo.broadcast_in_dim %2, dims = [0, 1] : (tensor<1x16xf32>) -> tensor<8x16xf32>
      %4 = stablehlo.add %1, %3 : tensor<8x16xf32>
      %5 = stablehlo.tanh %4 : tensor<8x16xf32>
      %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %6 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
      %7 = stablehlo.subtract %6, %5 : tensor<8x16xf32>
      %8 = stablehlo.dot_general %5, %arg8, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
      %9 = stablehlo.broadcast_in_dim %arg9, dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>
      %10 = stablehlo.broadcast_in_dim %9, dims = [0, 1] : (tensor<1x4xf32>) -> tensor<8x4xf32>
      %11 = stablehlo.add %8, %10 : tensor<8x4xf32>
      %12 = stablehlo.subtract %11, %arg11 : tensor<8x4xf32>
      %13 = stablehlo.multiply %12, %12 : tensor<8x4xf32>
      %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
      %14 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
      %15 = stablehlo.multiply %14, %12 : tensor<8x4xf32>
      %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %16 = stablehlo.reduce(%13 init: %cst_1) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32>
      %cst_2 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %17 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
      %18 = stablehlo.multiply %17, %15 : tensor<8x4xf32>
      %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %19 = stablehlo.reduce(%18 init: %cst_3) applies stablehlo.add across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
      %20 = stablehlo.reshape %19 : (tensor<4xf32>) -> tensor<1x4xf32>
      %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %21 = stablehlo.reduce(%20 init: %cst_4) applies stablehlo.add across dimensions = [0] : (tensor<1x4xf32>, tensor<f32>) -> tensor<4xf32>
      %22 = stablehlo.dot_general %18, %5, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
      %23 = stablehlo.transpose %22, dims = [1, 0] : (tensor<4x16xf32>) -> tensor<16x4xf32>
      %24 = stablehlo.dot_general %18, %arg8, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
      %25 = stablehlo.multiply %24, %7 : tensor<8x16xf32>
      %26 = stablehlo.multiply %25, %5 : tensor<8x16xf32>
      %27 = stablehlo.add %25, %26 : tensor<8x16xf32>
      %cst_5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %28 = stablehlo.reduce(%27 init: %cst_5) applies stablehlo.add across dimensions = [0] : (tensor<8x16xf32>, tensor<f32>) -> tensor<16xf32>
      %29 = stablehlo.reshape %28 : (tensor<16xf32>) -> tensor<1x16xf32>
      %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %30 = stablehlo.reduce(%29 init: %cst_6) applies stablehlo.add across dimensions = [0] : (tensor<1x16xf32>, tensor<f32>) -> tensor<16xf32>
      %31 = stablehlo.dot_general %27, %arg10, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
      %32 = stablehlo.transpose %31, dims = [1, 0] : (tensor<16x8xf32>) -> tensor<8x16xf32>
      %33 = "stablehlo.all_reduce"(%32) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
        %59 = stablehlo.add %arg12, %arg13 : tensor<f32>
        stablehlo.return %59 : tensor<f32>
      }) : (tensor<8x16xf32>) -> tensor<8x16xf32>
      %cst_7 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
      %34 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
      %35 = stablehlo.divide %33, %34 : tensor<8x16xf32>
      %36 = "stablehlo.all_reduce"(%30) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
        %59 = stablehlo.add %arg12, %arg13 : tensor<f32>
        stablehlo.return %59 : tensor<f32>
      }) : (tensor<16xf32>) -> tensor<16xf32>
      %cst_8 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
      %37 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<16xf32>
      %38 = stablehlo.divide %36, %37 : tensor<16xf32>
      %39 = "stablehlo.all_reduce"(%23) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
        %59 = stablehlo.add %arg12, %arg13 : tensor<f32>
        stablehlo.return %59 : tensor<f32>
      }) : (tensor<16x4xf32>) -> tensor<16x4xf32>
      %cst_9 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
      %40 = stablehlo.broadcast_in_dim %cst_9, dims = [] : (tensor<f32>) -> tensor<16x4xf32>
      %41 = stablehlo.divide %39, %40 : tensor<16x4xf32>
      %42 = "stablehlo.all_reduce"(%21) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
        %59 = stablehlo.add %arg12, %arg13 : tensor<f32>
        stablehlo.return %59 : tensor<f32>
      }) : (tensor<4xf32>) -> tensor<4xf32>
      %cst_10 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
      %43 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<4xf32>
      %44 = stablehlo.divide %42, %43 : tensor<4xf32>
      %45 = "stablehlo.all_reduce"(%16) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
        %59 = stablehlo.add %arg12, %arg13 : tensor<f32>
        stablehlo.return %59 : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      %cst_11 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
      %46 = stablehlo.divide %45, %cst_11 : tensor<f32>
      %cst_12 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
      %47 = stablehlo.broadcast_in_dim %cst_12, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
      %48 = stablehlo.multiply %47, %35 : tensor<8x16xf32>
      %49 = stablehlo.subtract %arg6, %48 : tensor<8x16xf32>
      %cst_13 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
      %50 = stablehlo.broadcast_in_dim %cst_13, dims = [] : (tensor<f32>) -> tensor<16xf32>
      %51 = stablehlo.multiply %50, %38 : tensor<16xf32>
      %52 = stablehlo.subtract %arg7, %51 : tensor<16xf32>
      %cst_14 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
      %53 = stablehlo.broadcast_in_dim %cst_14, dims = [] : (tensor<f32>) -> tensor<16x4xf32>
      %54 = stablehlo.multiply %53, %41 : tensor<16x4xf32>
      %55 = stablehlo.subtract %arg8, %54 : tensor<16x4xf32>
      %cst_15 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
      %56 = stablehlo.broadcast_in_dim %cst_15, dims = [] : (tensor<f32>) -> tensor<4xf32>
      %57 = stablehlo.multiply %56, %44 : tensor<4xf32>
      %58 = stablehlo.subtract %arg9, %57 : tensor<4xf32>
      sdy.return %49, %52, %55, %58, %46 : tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>, tensor<f32>
    } : (tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>, tensor<64x8xf32>, tensor<64x4xf32>) -> (tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>, tensor<f32>)
    return %0#0, %0#1, %0#2, %0#3, %0#4 : tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>, tensor<f32>
  }
}

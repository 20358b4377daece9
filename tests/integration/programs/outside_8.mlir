module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<16x4xf32>) -> (tensor<4xf32> {jax.result_info = "result[0]"}, tensor<f32> {jax.result_info = "result[1]"}) {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{}]>, <@mesh, [{"d"}, {}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"d"} (%arg2: tensor<4xf32>, %arg3: tensor<2x4xf32>) {
      %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %6 = stablehlo.reduce(%arg3 init: %cst_1) applies stablehlo.add across dimensions = [0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<4xf32>
      %7 = stablehlo.multiply %6, %arg2 : tensor<4xf32>
      %8 = "stablehlo.all_reduce"(%7) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %9 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %9 : tensor<f32>
      }) : (tensor<4xf32>) -> tensor<4xf32>
      sdy.return %8 : tensor<4xf32>
    } : (tensor<4xf32>, tensor<16x4xf32>) -> tensor<4xf32>
    %cst = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %2 = stablehlo.multiply %1, %0 : tensor<4xf32>
    %3 = stablehlo.subtract %arg0, %2 : tensor<4xf32>
    %4 = stablehlo.tanh %arg0 : tensor<4xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.reduce(%4 init: %cst_0) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    return %3, %5 : tensor<4xf32>, tensor<f32>
  }
}

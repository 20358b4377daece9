module @jit_sm attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4, "y"=2]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}, {name = "y", size = 2 : i64}]}}
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) -> (tensor<2x4xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {"y"}]>] out_shardings=[<@mesh, [{}, {"y"}]>] manual_axes={"x", "y"} (%arg1: tensor<2x2xf32>) {
      %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %5 = stablehlo.add %arg2, %arg3 : tensor<f32>
        stablehlo.return %5 : tensor<f32>
      }) : (tensor<2x2xf32>) -> tensor<2x2xf32>
      %2 = "stablehlo.all_gather"(%arg1) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>, use_global_device_ids}> : (tensor<2x2xf32>) -> tensor<4x2xf32>
      %3 = stablehlo.slice %2 [0:2, 0:2] : (tensor<4x2xf32>) -> tensor<2x2xf32>
      %4 = stablehlo.add %1, %3 : tensor<2x2xf32>
      sdy.return %4 : tensor<2x2xf32>
    } : (tensor<8x4xf32>) -> tensor<2x4xf32>
    return %0 : tensor<2x4xf32>
  }
}

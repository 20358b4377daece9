module @jit__fun attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["devices"=8]> {stablehlo.mesh = {axes = [{name = "devices", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<8xi32> {sdy.sharding = #sdy.sharding<@mesh, [{"devices"}]>}) -> (tensor<8xi32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"devices"}]>}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"devices"}]>] out_shardings=[<@mesh, [{"devices"}]>] manual_axes={"devices"} (%arg1: tensor<1xi32>) {
      %1 = stablehlo.reshape %arg1 : (tensor<1xi32>) -> tensor<i32>
      %2 = stablehlo.multiply %1, %1 : tensor<i32>
      %3 = "stablehlo.all_reduce"(%2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<i32>, %arg3: tensor<i32>):
        %5 = stablehlo.add %arg2, %arg3 : tensor<i32>
        stablehlo.return %5 : tensor<i32>
      }) : (tensor<i32>) -> tensor<i32>
      %4 = stablehlo.broadcast_in_dim %3, dims = [] : (tensor<i32>) -> tensor<1xi32>
      sdy.return %4 : tensor<1xi32>
    } : (tensor<8xi32>) -> tensor<8xi32>
    return %0 : tensor<8xi32>
  }
}

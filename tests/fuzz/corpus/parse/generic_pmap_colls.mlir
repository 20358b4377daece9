"builtin.module"() <{sym_name = "jit__fun"}> ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["i"=8]>, sym_name = "mesh"}> {stablehlo.mesh = {axes = [{name = "i", size = 8 : i64}]}} : () -> ()
  "func.func"() <{arg_attrs = [{sdy.sharding = #sdy.sharding<@mesh, [{"i"}, {}]>}], function_type = (tensor<8x8xf32>) -> (tensor<8x8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xi32>, tensor<8xf32>), res_attrs = [{jax.result_info = "result[0]", sdy.sharding = #sdy.sharding<@mesh, [{"i"}, {}, {}]>}, {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, [{"i"}, {}]>}, {jax.result_info = "result[2]", sdy.sharding = #sdy.sharding<@mesh, [{"i"}, {}]>}, {jax.result_info = "result[3]", sdy.sharding = #sdy.sharding<@mesh, [{"i"}, {}]>}, {jax.result_info = "result[4]", sdy.sharding = #sdy.sharding<@mesh, [{"i"}]>}, {jax.result_info = "result[5]", sdy.sharding = #sdy.sharding<@mesh, [{"i"}]>}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<8x8xf32>):
    %0:6 = "sdy.manual_computation"(%arg0) <{in_shardings = #sdy.sharding_per_value<[<@mesh, [{"i"}, {}]>]>, manual_axes = #sdy<manual_axes{"i"}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{"i"}, {}, {}]>, <@mesh, [{"i"}, {}]>, <@mesh, [{"i"}, {}]>, <@mesh, [{"i"}, {}]>, <@mesh, [{"i"}]>, <@mesh, [{"i"}]>]>}> ({
    ^bb0(%arg1: tensor<1x8xf32>):
      %1 = "stablehlo.reshape"(%arg1) : (tensor<1x8xf32>) -> tensor<8xf32>
      %2 = "stablehlo.broadcast_in_dim"(%1) <{broadcast_dimensions = array<i64: 1>}> : (tensor<8xf32>) -> tensor<1x8xf32>
      %3 = "stablehlo.all_gather"(%2) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> : (tensor<1x8xf32>) -> tensor<8x8xf32>
      %4 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %22 = "stablehlo.maximum"(%arg4, %arg5) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%22) : (tensor<f32>) -> ()
      }) : (tensor<8xf32>) -> tensor<8xf32>
      %5 = "stablehlo.collective_permute"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 6], [6, 7], [7, 0]]> : tensor<8x2xi64>}> : (tensor<8xf32>) -> tensor<8xf32>
      %6 = "stablehlo.all_to_all"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, split_count = 8 : i64, split_dimension = 0 : i64}> : (tensor<8xf32>) -> tensor<8xf32>
      %7 = "stablehlo.constant"() <{value = dense<1> : tensor<ui32>}> : () -> tensor<ui32>
      %8 = "stablehlo.constant"() <{value = dense<8> : tensor<ui32>}> : () -> tensor<ui32>
      %9 = "stablehlo.partition_id"() : () -> tensor<ui32>
      %10 = "stablehlo.divide"(%9, %7) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
      %11 = "stablehlo.remainder"(%10, %8) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
      %12 = "stablehlo.convert"(%11) : (tensor<ui32>) -> tensor<i32>
      %13 = "stablehlo.reduce_scatter"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %21 = "stablehlo.add"(%arg2, %arg3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%21) : (tensor<f32>) -> ()
      }) : (tensor<8xf32>) -> tensor<1xf32>
      %14 = "stablehlo.reshape"(%13) : (tensor<1xf32>) -> tensor<f32>
      %15 = "stablehlo.broadcast_in_dim"(%3) <{broadcast_dimensions = array<i64: 1, 2>}> : (tensor<8x8xf32>) -> tensor<1x8x8xf32>
      %16 = "stablehlo.broadcast_in_dim"(%4) <{broadcast_dimensions = array<i64: 1>}> : (tensor<8xf32>) -> tensor<1x8xf32>
      %17 = "stablehlo.broadcast_in_dim"(%5) <{broadcast_dimensions = array<i64: 1>}> : (tensor<8xf32>) -> tensor<1x8xf32>
      %18 = "stablehlo.broadcast_in_dim"(%6) <{broadcast_dimensions = array<i64: 1>}> : (tensor<8xf32>) -> tensor<1x8xf32>
      %19 = "stablehlo.broadcast_in_dim"(%12) <{broadcast_dimensions = array<i64>}> : (tensor<i32>) -> tensor<1xi32>
      %20 = "stablehlo.broadcast_in_dim"(%14) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1xf32>
      "sdy.return"(%15, %16, %17, %18, %19, %20) : (tensor<1x8x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1xi32>, tensor<1xf32>) -> ()
    }) : (tensor<8x8xf32>) -> (tensor<8x8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xi32>, tensor<8xf32>)
    "func.return"(%0#0, %0#1, %0#2, %0#3, %0#4, %0#5) : (tensor<8x8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xi32>, tensor<8xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

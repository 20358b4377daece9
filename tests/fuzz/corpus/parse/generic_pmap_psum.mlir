"builtin.module"() <{sym_name = "jit__fun"}> ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["i"=8]>, sym_name = "mesh"}> {stablehlo.mesh = {axes = [{name = "i", size = 8 : i64}]}} : () -> ()
  "func.func"() <{arg_attrs = [{sdy.sharding = #sdy.sharding<@mesh, [{"i"}, {}]>}], function_type = (tensor<8x3xf32>) -> tensor<8x3xf32>, res_attrs = [{jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"i"}, {}]>}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<8x3xf32>):
    %0 = "sdy.manual_computation"(%arg0) <{in_shardings = #sdy.sharding_per_value<[<@mesh, [{"i"}, {}]>]>, manual_axes = #sdy<manual_axes{"i"}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{"i"}, {}]>]>}> ({
    ^bb0(%arg1: tensor<1x3xf32>):
      %1 = "stablehlo.reshape"(%arg1) : (tensor<1x3xf32>) -> tensor<3xf32>
      %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %4 = "stablehlo.add"(%arg2, %arg3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%4) : (tensor<f32>) -> ()
      }) : (tensor<3xf32>) -> tensor<3xf32>
      %3 = "stablehlo.broadcast_in_dim"(%2) <{broadcast_dimensions = array<i64: 1>}> : (tensor<3xf32>) -> tensor<1x3xf32>
      "sdy.return"(%3) : (tensor<1x3xf32>) -> ()
    }) : (tensor<8x3xf32>) -> tensor<8x3xf32>
    "func.return"(%0) : (tensor<8x3xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = () -> (tensor<4xui32>, tensor<4xui32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}], sym_name = "main", sym_visibility = "public"}> ({
    %0 = "stablehlo.constant"() <{value = dense<0> : tensor<ui32>}> : () -> tensor<ui32>
    %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %2 = "stablehlo.reshape"(%1) : (tensor<4xui32>) -> tensor<2x2xui32>
    %3 = "stablehlo.bitcast_convert"(%2) : (tensor<2x2xui32>) -> tensor<2xui64>
    %4:2 = "stablehlo.rng_bit_generator"(%3) <{rng_algorithm = #stablehlo<rng_algorithm DEFAULT>}> : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
    %5 = "stablehlo.bitcast_convert"(%4#0) : (tensor<2xui64>) -> tensor<2x2xui32>
    %6 = "stablehlo.reshape"(%5) : (tensor<2x2xui32>) -> tensor<4xui32>
    "func.return"(%6, %4#1) : (tensor<4xui32>, tensor<4xui32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["x"=4, "y"=2]>, sym_name = "mesh"}> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}, {name = "y", size = 2 : i64}]}} : () -> ()
  "func.func"() <{function_type = (tensor<8x8xf32>) -> tensor<8x8xf32>, res_attrs = [{jax.result_info = "result"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<8x8xf32>):
    %0 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<8x8xf32>
    %2 = "stablehlo.multiply"(%arg0, %1) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %3 = "sdy.sharding_constraint"(%2) <{sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}> : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %4 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %5 = "stablehlo.broadcast_in_dim"(%4) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<8x8xf32>
    %6 = "stablehlo.add"(%3, %5) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    "func.return"(%6) : (tensor<8x8xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

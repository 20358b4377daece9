"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["x"=4, "y"=2]>, sym_name = "mesh"}> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}, {name = "y", size = 2 : i64}]}} : () -> ()
  "func.func"() <{arg_attrs = [{sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}], function_type = (tensor<8x8xf32>) -> tensor<8xf32>, res_attrs = [{jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}]>}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<8x8xf32>):
    %0 = "stablehlo.transpose"(%arg0) <{permutation = array<i64: 1, 0>}> : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = "stablehlo.dot_general"(%arg0, %0) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}> : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %2 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %3 = "stablehlo.reduce"(%1, %2) <{dimensions = array<i64: 0>}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %4 = "stablehlo.add"(%arg1, %arg2) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%4) : (tensor<f32>) -> ()
    }) : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    "func.return"(%3) : (tensor<8xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

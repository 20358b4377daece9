"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<i32>) -> (tensor<i32>, tensor<f32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<i32>):
    %0 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %1 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %2:3 = "stablehlo.while"(%arg0, %0, %1) ({
    ^bb0(%arg4: tensor<i32>, %arg5: tensor<i32>, %arg6: tensor<f32>):
      %7 = "stablehlo.compare"(%arg5, %arg4) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
      "stablehlo.return"(%7) : (tensor<i1>) -> ()
    }, {
    ^bb0(%arg1: tensor<i32>, %arg2: tensor<i32>, %arg3: tensor<f32>):
      %3 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
      %4 = "stablehlo.add"(%arg2, %3) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      %5 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %6 = "stablehlo.multiply"(%arg3, %5) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%arg1, %4, %6) : (tensor<i32>, tensor<i32>, tensor<f32>) -> ()
    }) : (tensor<i32>, tensor<i32>, tensor<f32>) -> (tensor<i32>, tensor<i32>, tensor<f32>)
    "func.return"(%2#1, %2#2) : (tensor<i32>, tensor<f32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<i32>, tensor<3xf32>) -> tensor<3xf32>, res_attrs = [{jax.result_info = "result"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<i32>, %arg1: tensor<3xf32>):
    %0 = "stablehlo.convert"(%arg0) : (tensor<i32>) -> tensor<i32>
    %1 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %2 = "stablehlo.constant"() <{value = dense<2> : tensor<i32>}> : () -> tensor<i32>
    %3 = "stablehlo.clamp"(%1, %0, %2) : (tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<i32>
    %4 = "stablehlo.case"(%3) ({
      %9 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %10 = "stablehlo.broadcast_in_dim"(%9) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3xf32>
      %11 = "stablehlo.add"(%arg1, %10) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      "stablehlo.return"(%11) : (tensor<3xf32>) -> ()
    }, {
      %6 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %7 = "stablehlo.broadcast_in_dim"(%6) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3xf32>
      %8 = "stablehlo.multiply"(%arg1, %7) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      "stablehlo.return"(%8) : (tensor<3xf32>) -> ()
    }, {
      %5 = "stablehlo.sine"(%arg1) : (tensor<3xf32>) -> tensor<3xf32>
      "stablehlo.return"(%5) : (tensor<3xf32>) -> ()
    }) : (tensor<i32>) -> tensor<3xf32>
    "func.return"(%4) : (tensor<3xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

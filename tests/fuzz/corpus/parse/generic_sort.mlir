"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<5xf32>, tensor<5xi32>) -> (tensor<5xf32>, tensor<5xf32>, tensor<5xi32>, tensor<5xi32>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1][0]"}, {jax.result_info = "result[1][1]"}, {jax.result_info = "result[2]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg8: tensor<5xf32>, %arg9: tensor<5xi32>):
    %33 = "func.call"(%arg8) <{callee = @sort}> : (tensor<5xf32>) -> tensor<5xf32>
    %34:2 = "stablehlo.sort"(%arg8, %arg9) <{dimension = 0 : i64, is_stable = true}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>, %arg12: tensor<i32>, %arg13: tensor<i32>):
      %36 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %37 = "stablehlo.compare"(%arg10, %36) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %38 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %39 = "stablehlo.select"(%37, %38, %arg10) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %40 = "stablehlo.compare"(%arg10, %arg10) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %41 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
      %42 = "stablehlo.select"(%40, %41, %39) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %43 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %44 = "stablehlo.compare"(%arg11, %43) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %45 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %46 = "stablehlo.select"(%44, %45, %arg11) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %47 = "stablehlo.compare"(%arg11, %arg11) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %48 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
      %49 = "stablehlo.select"(%47, %48, %46) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %50 = "stablehlo.compare"(%42, %49) <{compare_type = #stablehlo<comparison_type TOTALORDER>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      "stablehlo.return"(%50) : (tensor<i1>) -> ()
    }) : (tensor<5xf32>, tensor<5xi32>) -> (tensor<5xf32>, tensor<5xi32>)
    %35 = "func.call"(%arg8) <{callee = @argsort}> : (tensor<5xf32>) -> tensor<5xi32>
    "func.return"(%33, %34#0, %34#1, %35) : (tensor<5xf32>, tensor<5xf32>, tensor<5xi32>, tensor<5xi32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<5xf32>) -> tensor<5xf32>, sym_name = "sort", sym_visibility = "private"}> ({
  ^bb0(%arg5: tensor<5xf32>):
    %17 = "stablehlo.sort"(%arg5) <{dimension = 0 : i64, is_stable = true}> ({
    ^bb0(%arg6: tensor<f32>, %arg7: tensor<f32>):
      %18 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %19 = "stablehlo.compare"(%arg6, %18) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %20 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %21 = "stablehlo.select"(%19, %20, %arg6) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %22 = "stablehlo.compare"(%arg6, %arg6) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %23 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
      %24 = "stablehlo.select"(%22, %23, %21) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %25 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %26 = "stablehlo.compare"(%arg7, %25) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %27 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %28 = "stablehlo.select"(%26, %27, %arg7) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %29 = "stablehlo.compare"(%arg7, %arg7) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %30 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
      %31 = "stablehlo.select"(%29, %30, %28) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %32 = "stablehlo.compare"(%24, %31) <{compare_type = #stablehlo<comparison_type TOTALORDER>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      "stablehlo.return"(%32) : (tensor<i1>) -> ()
    }) : (tensor<5xf32>) -> tensor<5xf32>
    "func.return"(%17) : (tensor<5xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<5xf32>) -> tensor<5xi32>, sym_name = "argsort", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<5xf32>):
    %0 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> : () -> tensor<5xi32>
    %1:2 = "stablehlo.sort"(%arg0, %0) <{dimension = 0 : i64, is_stable = true}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>, %arg3: tensor<i32>, %arg4: tensor<i32>):
      %2 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %3 = "stablehlo.compare"(%arg1, %2) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %4 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %5 = "stablehlo.select"(%3, %4, %arg1) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %6 = "stablehlo.compare"(%arg1, %arg1) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %7 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
      %8 = "stablehlo.select"(%6, %7, %5) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %9 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %10 = "stablehlo.compare"(%arg2, %9) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction EQ>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %11 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
      %12 = "stablehlo.select"(%10, %11, %arg2) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %13 = "stablehlo.compare"(%arg2, %arg2) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction NE>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %14 = "stablehlo.constant"() <{value = dense<0x7FC00000> : tensor<f32>}> : () -> tensor<f32>
      %15 = "stablehlo.select"(%13, %14, %12) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %16 = "stablehlo.compare"(%8, %15) <{compare_type = #stablehlo<comparison_type TOTALORDER>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
      "stablehlo.return"(%16) : (tensor<i1>) -> ()
    }) : (tensor<5xf32>, tensor<5xi32>) -> (tensor<5xf32>, tensor<5xi32>)
    "func.return"(%1#1) : (tensor<5xi32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

module @jit_step attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg1: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg2: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg3: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg4: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg5: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg6: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg7: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg8: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg9: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg10: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg11: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg12: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg13: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg14: tensor<512x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg15: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, %arg16: tensor<64x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %arg17: tensor<64x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<512x512xf32> {jax.result_info = "result[0][0][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][0][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<512x512xf32> {jax.result_info = "result[0][1][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][1][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<512x512xf32> {jax.result_info = "result[0][2][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][2][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<512x512xf32> {jax.result_info = "result[0][3][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][3][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<512x512xf32> {jax.result_info = "result[0][4][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][4][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<512x512xf32> {jax.result_info = "result[0][5][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][5][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<512x512xf32> {jax.result_info = "result[0][6][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][6][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<512x512xf32> {jax.result_info = "result[0][7][0]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, tensor<512xf32> {jax.result_info = "result[0][7][1]", sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}, tensor<f32> {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, []>}) {
    %0 = stablehlo.dot_general %arg16, %arg0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %1 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %3 = stablehlo.add %0, %2 : tensor<64x512xf32>
    %4 = stablehlo.tanh %3 : tensor<64x512xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %6 = stablehlo.subtract %5, %4 : tensor<64x512xf32>
    %7 = stablehlo.dot_general %4, %arg2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %8 = stablehlo.broadcast_in_dim %arg3, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %10 = stablehlo.add %7, %9 : tensor<64x512xf32>
    %11 = stablehlo.tanh %10 : tensor<64x512xf32>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %13 = stablehlo.subtract %12, %11 : tensor<64x512xf32>
    %14 = stablehlo.dot_general %11, %arg4, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %15 = stablehlo.broadcast_in_dim %arg5, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %17 = stablehlo.add %14, %16 : tensor<64x512xf32>
    %18 = stablehlo.tanh %17 : tensor<64x512xf32>
    %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %19 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %20 = stablehlo.subtract %19, %18 : tensor<64x512xf32>
    %21 = stablehlo.dot_general %18, %arg6, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %22 = stablehlo.broadcast_in_dim %arg7, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %23 = stablehlo.broadcast_in_dim %22, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %24 = stablehlo.add %21, %23 : tensor<64x512xf32>
    %25 = stablehlo.tanh %24 : tensor<64x512xf32>
    %cst_2 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %26 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %27 = stablehlo.subtract %26, %25 : tensor<64x512xf32>
    %28 = stablehlo.dot_general %25, %arg8, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %29 = stablehlo.broadcast_in_dim %arg9, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %30 = stablehlo.broadcast_in_dim %29, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %31 = stablehlo.add %28, %30 : tensor<64x512xf32>
    %32 = stablehlo.tanh %31 : tensor<64x512xf32>
    %cst_3 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %33 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %34 = stablehlo.subtract %33, %32 : tensor<64x512xf32>
    %35 = stablehlo.dot_general %32, %arg10, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %36 = stablehlo.broadcast_in_dim %arg11, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %37 = stablehlo.broadcast_in_dim %36, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %38 = stablehlo.add %35, %37 : tensor<64x512xf32>
    %39 = stablehlo.tanh %38 : tensor<64x512xf32>
    %cst_4 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %40 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %41 = stablehlo.subtract %40, %39 : tensor<64x512xf32>
    %42 = stablehlo.dot_general %39, %arg12, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %43 = stablehlo.broadcast_in_dim %arg13, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %44 = stablehlo.broadcast_in_dim %43, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %45 = stablehlo.add %42, %44 : tensor<64x512xf32>
    %46 = stablehlo.tanh %45 : tensor<64x512xf32>
    %cst_5 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %47 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %48 = stablehlo.subtract %47, %46 : tensor<64x512xf32>
    %49 = stablehlo.dot_general %46, %arg14, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %50 = stablehlo.broadcast_in_dim %arg15, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %51 = stablehlo.broadcast_in_dim %50, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %52 = stablehlo.add %49, %51 : tensor<64x512xf32>
    %53 = stablehlo.tanh %52 : tensor<64x512xf32>
    %cst_6 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %54 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %55 = stablehlo.subtract %54, %53 : tensor<64x512xf32>
    %56 = stablehlo.subtract %53, %arg17 : tensor<64x512xf32>
    %57 = stablehlo.multiply %56, %56 : tensor<64x512xf32>
    %cst_7 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %58 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %59 = stablehlo.multiply %58, %56 : tensor<64x512xf32>
    %cst_8 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %60 = stablehlo.reduce(%57 init: %cst_8) applies stablehlo.add across dimensions = [0, 1] : (tensor<64x512xf32>, tensor<f32>) -> tensor<f32>
    %cst_9 = stablehlo.constant dense<3.276800e+04> : tensor<f32>
    %61 = stablehlo.divide %60, %cst_9 : tensor<f32>
    %cst_10 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_11 = stablehlo.constant dense<3.276800e+04> : tensor<f32>
    %62 = stablehlo.divide %cst_10, %cst_11 : tensor<f32>
    %63 = stablehlo.broadcast_in_dim %62, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %64 = stablehlo.multiply %63, %59 : tensor<64x512xf32>
    %65 = stablehlo.multiply %64, %55 : tensor<64x512xf32>
    %66 = stablehlo.multiply %65, %53 : tensor<64x512xf32>
    %67 = stablehlo.add %65, %66 : tensor<64x512xf32>
    %cst_12 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %68 = stablehlo.reduce(%67 init: %cst_12) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %69 = stablehlo.reshape %68 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_13 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %70 = stablehlo.reduce(%69 init: %cst_13) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %71 = stablehlo.dot_general %67, %46, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %72 = stablehlo.transpose %71, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %73 = stablehlo.dot_general %67, %arg14, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %74 = stablehlo.multiply %73, %48 : tensor<64x512xf32>
    %75 = stablehlo.multiply %74, %46 : tensor<64x512xf32>
    %76 = stablehlo.add %74, %75 : tensor<64x512xf32>
    %cst_14 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %77 = stablehlo.reduce(%76 init: %cst_14) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %78 = stablehlo.reshape %77 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_15 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %79 = stablehlo.reduce(%78 init: %cst_15) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %80 = stablehlo.dot_general %76, %39, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %81 = stablehlo.transpose %80, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %82 = stablehlo.dot_general %76, %arg12, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %83 = stablehlo.multiply %82, %41 : tensor<64x512xf32>
    %84 = stablehlo.multiply %83, %39 : tensor<64x512xf32>
    %85 = stablehlo.add %83, %84 : tensor<64x512xf32>
    %cst_16 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %86 = stablehlo.reduce(%85 init: %cst_16) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %87 = stablehlo.reshape %86 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_17 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %88 = stablehlo.reduce(%87 init: %cst_17) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %89 = stablehlo.dot_general %85, %32, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %90 = stablehlo.transpose %89, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %91 = stablehlo.dot_general %85, %arg10, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %92 = stablehlo.multiply %91, %34 : tensor<64x512xf32>
    %93 = stablehlo.multiply %92, %32 : tensor<64x512xf32>
    %94 = stablehlo.add %92, %93 : tensor<64x512xf32>
    %cst_18 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %95 = stablehlo.reduce(%94 init: %cst_18) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %96 = stablehlo.reshape %95 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_19 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %97 = stablehlo.reduce(%96 init: %cst_19) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %98 = stablehlo.dot_general %94, %25, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %99 = stablehlo.transpose %98, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %100 = stablehlo.dot_general %94, %arg8, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %101 = stablehlo.multiply %100, %27 : tensor<64x512xf32>
    %102 = stablehlo.multiply %101, %25 : tensor<64x512xf32>
    %103 = stablehlo.add %101, %102 : tensor<64x512xf32>
    %cst_20 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %104 = stablehlo.reduce(%103 init: %cst_20) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %105 = stablehlo.reshape %104 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_21 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %106 = stablehlo.reduce(%105 init: %cst_21) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %107 = stablehlo.dot_general %103, %18, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %108 = stablehlo.transpose %107, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %109 = stablehlo.dot_general %103, %arg6, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %110 = stablehlo.multiply %109, %20 : tensor<64x512xf32>
    %111 = stablehlo.multiply %110, %18 : tensor<64x512xf32>
    %112 = stablehlo.add %110, %111 : tensor<64x512xf32>
    %cst_22 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %113 = stablehlo.reduce(%112 init: %cst_22) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %114 = stablehlo.reshape %113 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_23 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %115 = stablehlo.reduce(%114 init: %cst_23) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %116 = stablehlo.dot_general %112, %11, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %117 = stablehlo.transpose %116, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %118 = stablehlo.dot_general %112, %arg4, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %119 = stablehlo.multiply %118, %13 : tensor<64x512xf32>
    %120 = stablehlo.multiply %119, %11 : tensor<64x512xf32>
    %121 = stablehlo.add %119, %120 : tensor<64x512xf32>
    %cst_24 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %122 = stablehlo.reduce(%121 init: %cst_24) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %123 = stablehlo.reshape %122 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_25 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %124 = stablehlo.reduce(%123 init: %cst_25) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %125 = stablehlo.dot_general %121, %4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %126 = stablehlo.transpose %125, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %127 = stablehlo.dot_general %121, %arg2, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
    %128 = stablehlo.multiply %127, %6 : tensor<64x512xf32>
    %129 = stablehlo.multiply %128, %4 : tensor<64x512xf32>
    %130 = stablehlo.add %128, %129 : tensor<64x512xf32>
    %cst_26 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %131 = stablehlo.reduce(%130 init: %cst_26) applies stablehlo.add across dimensions = [0] : (tensor<64x512xf32>, tensor<f32>) -> tensor<512xf32>
    %132 = stablehlo.reshape %131 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_27 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %133 = stablehlo.reduce(%132 init: %cst_27) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %134 = stablehlo.dot_general %130, %arg16, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
    %135 = stablehlo.transpose %134, dims = [1, 0] : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %cst_28 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %136 = stablehlo.broadcast_in_dim %cst_28, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %137 = stablehlo.multiply %136, %135 : tensor<512x512xf32>
    %138 = stablehlo.subtract %arg0, %137 : tensor<512x512xf32>
    %cst_29 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %139 = stablehlo.broadcast_in_dim %cst_29, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %140 = stablehlo.multiply %139, %133 : tensor<512xf32>
    %141 = stablehlo.subtract %arg1, %140 : tensor<512xf32>
    %cst_30 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %142 = stablehlo.broadcast_in_dim %cst_30, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %143 = stablehlo.multiply %142, %126 : tensor<512x512xf32>
    %144 = stablehlo.subtract %arg2, %143 : tensor<512x512xf32>
    %cst_31 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %145 = stablehlo.broadcast_in_dim %cst_31, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %146 = stablehlo.multiply %145, %124 : tensor<512xf32>
    %147 = stablehlo.subtract %arg3, %146 : tensor<512xf32>
    %cst_32 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %148 = stablehlo.broadcast_in_dim %cst_32, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %149 = stablehlo.multiply %148, %117 : tensor<512x512xf32>
    %150 = stablehlo.subtract %arg4, %149 : tensor<512x512xf32>
    %cst_33 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %151 = stablehlo.broadcast_in_dim %cst_33, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %152 = stablehlo.multiply %151, %115 : tensor<512xf32>
    %153 = stablehlo.subtract %arg5, %152 : tensor<512xf32>
    %cst_34 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %154 = stablehlo.broadcast_in_dim %cst_34, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %155 = stablehlo.multiply %154, %108 : tensor<512x512xf32>
    %156 = stablehlo.subtract %arg6, %155 : tensor<512x512xf32>
    %cst_35 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %157 = stablehlo.broadcast_in_dim %cst_35, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %158 = stablehlo.multiply %157, %106 : tensor<512xf32>
    %159 = stablehlo.subtract %arg7, %158 : tensor<512xf32>
    %cst_36 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %160 = stablehlo.broadcast_in_dim %cst_36, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %161 = stablehlo.multiply %160, %99 : tensor<512x512xf32>
    %162 = stablehlo.subtract %arg8, %161 : tensor<512x512xf32>
    %cst_37 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %163 = stablehlo.broadcast_in_dim %cst_37, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %164 = stablehlo.multiply %163, %97 : tensor<512xf32>
    %165 = stablehlo.subtract %arg9, %164 : tensor<512xf32>
    %cst_38 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %166 = stablehlo.broadcast_in_dim %cst_38, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %167 = stablehlo.multiply %166, %90 : tensor<512x512xf32>
    %168 = stablehlo.subtract %arg10, %167 : tensor<512x512xf32>
    %cst_39 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %169 = stablehlo.broadcast_in_dim %cst_39, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %170 = stablehlo.multiply %169, %88 : tensor<512xf32>
    %171 = stablehlo.subtract %arg11, %170 : tensor<512xf32>
    %cst_40 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %172 = stablehlo.broadcast_in_dim %cst_40, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %173 = stablehlo.multiply %172, %81 : tensor<512x512xf32>
    %174 = stablehlo.subtract %arg12, %173 : tensor<512x512xf32>
    %cst_41 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %175 = stablehlo.broadcast_in_dim %cst_41, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %176 = stablehlo.multiply %175, %79 : tensor<512xf32>
    %177 = stablehlo.subtract %arg13, %176 : tensor<512xf32>
    %cst_42 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %178 = stablehlo.broadcast_in_dim %cst_42, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %179 = stablehlo.multiply %178, %72 : tensor<512x512xf32>
    %180 = stablehlo.subtract %arg14, %179 : tensor<512x512xf32>
    %cst_43 = stablehlo.constant dense<0.00999999977> : tensor<f32>
    %181 = stablehlo.broadcast_in_dim %cst_43, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %182 = stablehlo.multiply %181, %70 : tensor<512xf32>
    %183 = stablehlo.subtract %arg15, %182 : tensor<512xf32>
    return %138, %141, %144, %147, %150, %153, %156, %159, %162, %165, %168, %171, %174, %177, %180, %183, %61 : tensor<512x512xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<f32>
  }
}

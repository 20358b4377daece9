module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x4x8xf32>, %arg1: tensor<2x4x8xf32>, %arg2: tensor<2x4x8xf32>) -> (tensor<f32> {jax.result_info = "result[0]"}, tensor<2x4x8xf32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [2], precision = [DEFAULT, DEFAULT] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
    %cst = stablehlo.constant dense<8.000000e+00> : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4x4xf32>
    %2 = stablehlo.divide %0, %1 : tensor<2x4x4xf32>
    %cst_0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %3 = stablehlo.reduce(%2 init: %cst_0) applies stablehlo.maximum across dimensions = [2] : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %4 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<2x4xf32>
    %5 = stablehlo.maximum %4, %3 : tensor<2x4xf32>
    %6 = stablehlo.broadcast_in_dim %5, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %7 = stablehlo.broadcast_in_dim %6, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %8 = stablehlo.subtract %2, %7 : tensor<2x4x4xf32>
    %9 = stablehlo.exponential %8 : tensor<2x4x4xf32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %10 = stablehlo.reduce(%9 init: %cst_2) applies stablehlo.add across dimensions = [2] : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %11 = stablehlo.broadcast_in_dim %10, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %12 = stablehlo.broadcast_in_dim %11, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %13 = stablehlo.divide %9, %12 : tensor<2x4x4xf32>
    %14 = stablehlo.multiply %11, %11 : tensor<2x4x1xf32>
    %cst_3 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %15 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %16 = stablehlo.divide %15, %14 : tensor<2x4x1xf32>
    %17 = stablehlo.dot_general %13, %arg2, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %18 = stablehlo.reduce(%17 init: %cst_4) applies stablehlo.add across dimensions = [2] : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %cst_5 = stablehlo.constant dense<8.000000e+00> : tensor<f32>
    %20 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %21 = stablehlo.divide %19, %20 : tensor<2x4x1xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %22:4 = call @_var(%17, %c) : (tensor<2x4x8xf32>, tensor<i32>) -> (tensor<2x4x1xf32>, tensor<2x4x8xf32>, tensor<f32>, tensor<i1>)
    %23 = stablehlo.broadcast_in_dim %21, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %24 = stablehlo.subtract %17, %23 : tensor<2x4x8xf32>
    %cst_6 = stablehlo.constant dense<9.99999974E-6> : tensor<f32>
    %25 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %26 = stablehlo.add %22#0, %25 : tensor<2x4x1xf32>
    %27 = stablehlo.sqrt %26 : tensor<2x4x1xf32>
    %cst_7 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %28 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %29 = stablehlo.divide %28, %27 : tensor<2x4x1xf32>
    %30 = stablehlo.broadcast_in_dim %27, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %31 = stablehlo.divide %24, %30 : tensor<2x4x8xf32>
    %32 = stablehlo.multiply %27, %27 : tensor<2x4x1xf32>
    %cst_8 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %33 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %34 = stablehlo.divide %33, %32 : tensor<2x4x1xf32>
    %cst_9 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %35 = stablehlo.reduce(%31 init: %cst_9) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<f32>
    %cst_10 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %36 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<2x4x8xf32>
    %37 = stablehlo.broadcast_in_dim %34, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %38 = stablehlo.multiply %36, %37 : tensor<2x4x8xf32>
    %39 = stablehlo.multiply %38, %24 : tensor<2x4x8xf32>
    %cst_11 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %40 = stablehlo.reduce(%39 init: %cst_11) applies stablehlo.add across dimensions = [2] : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %41 = stablehlo.reshape %40 : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %42 = stablehlo.negate %41 : tensor<2x4x1xf32>
    %43 = stablehlo.broadcast_in_dim %27, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %44 = stablehlo.divide %36, %43 : tensor<2x4x8xf32>
    %45 = stablehlo.multiply %42, %29 : tensor<2x4x1xf32>
    %46 = stablehlo.negate %44 : tensor<2x4x8xf32>
    %cst_12 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %47 = stablehlo.reduce(%46 init: %cst_12) applies stablehlo.add across dimensions = [2] : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %48 = stablehlo.reshape %47 : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %49 = call @_var_0(%22#1, %22#2, %22#3, %45) : (tensor<2x4x8xf32>, tensor<f32>, tensor<i1>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %50 = stablehlo.add %44, %49 : tensor<2x4x8xf32>
    %cst_13 = stablehlo.constant dense<8.000000e+00> : tensor<f32>
    %51 = stablehlo.broadcast_in_dim %cst_13, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %52 = stablehlo.divide %48, %51 : tensor<2x4x1xf32>
    %cst_14 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %53 = stablehlo.reduce(%52 init: %cst_14) applies stablehlo.add across dimensions = [2] : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %54 = stablehlo.broadcast_in_dim %53, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x8xf32>
    %55 = stablehlo.add %50, %54 : tensor<2x4x8xf32>
    %56 = stablehlo.dot_general %55, %arg2, batching_dims = [0] x [0], contracting_dims = [2] x [2], precision = [DEFAULT, DEFAULT] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
    %57 = stablehlo.broadcast_in_dim %16, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %58 = stablehlo.multiply %56, %57 : tensor<2x4x4xf32>
    %59 = stablehlo.multiply %58, %9 : tensor<2x4x4xf32>
    %cst_15 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %60 = stablehlo.reduce(%59 init: %cst_15) applies stablehlo.add across dimensions = [2] : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %61 = stablehlo.reshape %60 : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %62 = stablehlo.negate %61 : tensor<2x4x1xf32>
    %63 = stablehlo.broadcast_in_dim %11, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
    %64 = stablehlo.divide %56, %63 : tensor<2x4x4xf32>
    %cst_16 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %65 = stablehlo.reduce(%62 init: %cst_16) applies stablehlo.add across dimensions = [2] : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %66 = stablehlo.broadcast_in_dim %65, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x4xf32>
    %67 = stablehlo.add %64, %66 : tensor<2x4x4xf32>
    %68 = stablehlo.multiply %67, %9 : tensor<2x4x4xf32>
    %cst_17 = stablehlo.constant dense<8.000000e+00> : tensor<f32>
    %69 = stablehlo.broadcast_in_dim %cst_17, dims = [] : (tensor<f32>) -> tensor<2x4x4xf32>
    %70 = stablehlo.divide %68, %69 : tensor<2x4x4xf32>
    %71 = stablehlo.dot_general %70, %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %35, %71 : tensor<f32>, tensor<2x4x8xf32>
  }
  func.func private @_var(%arg0: tensor<2x4x8xf32>, %arg1: tensor<i32>) -> (tensor<2x4x1xf32>, tensor<2x4x8xf32>, tensor<f32>, tensor<i1>) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [2] : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %cst_0 = stablehlo.constant dense<8.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %3 = stablehlo.divide %1, %2 : tensor<2x4x1xf32>
    %4 = stablehlo.broadcast_in_dim %3, dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %5 = stablehlo.subtract %arg0, %4 : tensor<2x4x8xf32>
    %6 = chlo.square %5 : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
    %cst_1 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<2x4x8xf32>
    %8 = stablehlo.multiply %7, %5 : tensor<2x4x8xf32>
    %9 = stablehlo.convert %arg1 : (tensor<i32>) -> tensor<f32>
    %cst_2 = stablehlo.constant dense<8.000000e+00> : tensor<f32>
    %10 = stablehlo.subtract %cst_2, %9 : tensor<f32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %11 = stablehlo.reduce(%6 init: %cst_3) applies stablehlo.add across dimensions = [2] : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %12 = stablehlo.broadcast_in_dim %11, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %13 = stablehlo.broadcast_in_dim %10, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %14 = stablehlo.divide %12, %13 : tensor<2x4x1xf32>
    %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %15 = stablehlo.compare GT, %10, %cst_4, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %cst_5 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %16 = call @_where(%15, %14, %cst_5) : (tensor<i1>, tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    return %16, %8, %10, %15 : tensor<2x4x1xf32>, tensor<2x4x8xf32>, tensor<f32>, tensor<i1>
  }
  func.func private @_where(%arg0: tensor<i1>, %arg1: tensor<2x4x1xf32>, %arg2: tensor<f32>) -> tensor<2x4x1xf32> {
    %0 = stablehlo.convert %arg2 : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %2 = stablehlo.select %arg0, %arg1, %1 : tensor<i1>, tensor<2x4x1xf32>
    return %2 : tensor<2x4x1xf32>
  }
  func.func private @_var_0(%arg0: tensor<2x4x8xf32>, %arg1: tensor<f32>, %arg2: tensor<i1>, %arg3: tensor<2x4x1xf32>) -> tensor<2x4x8xf32> {
    %0 = call @_where_1(%arg2, %arg3) : (tensor<i1>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %1 = stablehlo.broadcast_in_dim %arg1, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %2 = stablehlo.divide %0, %1 : tensor<2x4x1xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [2] : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %4 = stablehlo.broadcast_in_dim %3, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x8xf32>
    %5 = stablehlo.multiply %4, %arg0 : tensor<2x4x8xf32>
    %6 = stablehlo.negate %5 : tensor<2x4x8xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %7 = stablehlo.reduce(%6 init: %cst_0) applies stablehlo.add across dimensions = [2] : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4xf32>
    %8 = stablehlo.reshape %7 : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
    %cst_1 = stablehlo.constant dense<8.000000e+00> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %10 = stablehlo.divide %8, %9 : tensor<2x4x1xf32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %11 = stablehlo.reduce(%10 init: %cst_2) applies stablehlo.add across dimensions = [2] : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4xf32>
    %12 = stablehlo.broadcast_in_dim %11, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4x8xf32>
    %13 = stablehlo.add %5, %12 : tensor<2x4x8xf32>
    return %13 : tensor<2x4x8xf32>
  }
  func.func private @_where_1(%arg0: tensor<i1>, %arg1: tensor<2x4x1xf32>) -> tensor<2x4x1xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4x1xf32>
    %1 = stablehlo.select %arg0, %arg1, %0 : tensor<i1>, tensor<2x4x1xf32>
    return %1 : tensor<2x4x1xf32>
  }
}

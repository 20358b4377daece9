module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32> {jax.result_info = "result[0]"}, tensor<4xf32> {jax.result_info = "result[1]"}, tensor<7xf32> {jax.result_info = "result[2]"}, tensor<4xf32> {jax.result_info = "result[3]"}, tensor<8xf32> {jax.result_info = "result[4]"}, tensor<4x4xf32> {jax.result_info = "result[5]"}, tensor<2xf32> {jax.result_info = "result[6][0]"}, tensor<2xi32> {jax.result_info = "result[6][1]"}, tensor<4xf32> {jax.result_info = "result[7]"}, tensor<4xf32> {jax.result_info = "result[8]"}, tensor<4xf32> {jax.result_info = "result[9]"}, tensor<4xf32> {jax.result_info = "result[10]"}, tensor<3x3xf32> {jax.result_info = "result[11]"}, tensor<4xf32> {jax.result_info = "result[12]"}, tensor<4xi1> {jax.result_info = "result[13]"}, tensor<4xf32> {jax.result_info = "result[14]"}, tensor<4xf32> {jax.result_info = "result[15]"}, tensor<4xf32> {jax.result_info = "result[16]"}, tensor<4xf32> {jax.result_info = "result[17]"}, tensor<4xf32> {jax.result_info = "result[18]"}) {
    %0 = call @cumsum(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<1> : tensor<i32>
    %1 = call @clip(%arg0, %c, %c_0) : (tensor<4xf32>, tensor<i32>, tensor<i32>) -> tensor<4xf32>
    %c_1 = stablehlo.constant dense<0> : tensor<i32>
    %2 = call @_pad(%arg0, %c_1) : (tensor<4xf32>, tensor<i32>) -> tensor<7xf32>
    %3 = call @_flip(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %4 = stablehlo.concatenate %arg0, %arg0, dim = 0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
    %5 = stablehlo.broadcast_in_dim %arg0, dims = [0] : (tensor<4xf32>) -> tensor<4x1xf32>
    %6 = stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>
    %7 = stablehlo.broadcast_in_dim %5, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x4xf32>
    %8 = stablehlo.broadcast_in_dim %6, dims = [0, 1] : (tensor<1x4xf32>) -> tensor<4x4xf32>
    %9 = stablehlo.multiply %7, %8 : tensor<4x4xf32>
    %10 = call @tril(%9) : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %values, %indices = chlo.top_k(%arg0, k = 2) : tensor<4xf32> -> (tensor<2xf32>, tensor<2xi32>)
    %11 = chlo.erf %arg0 : tensor<4xf32> -> tensor<4xf32>
    %cst = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %13 = stablehlo.multiply %arg0, %12 : tensor<4xf32>
    %14 = chlo.erf_inv %13 : tensor<4xf32> -> tensor<4xf32>
    %15 = chlo.lgamma %arg0 : tensor<4xf32> -> tensor<4xf32>
    %16 = chlo.digamma %arg0 : tensor<4xf32> -> tensor<4xf32>
    %17 = stablehlo.iota dim = 0 : tensor<3x3xi32>
    %18 = stablehlo.iota dim = 1 : tensor<3x3xi32>
    %c_2 = stablehlo.constant dense<0> : tensor<i32>
    %19 = stablehlo.broadcast_in_dim %c_2, dims = [] : (tensor<i32>) -> tensor<3x3xi32>
    %20 = stablehlo.add %17, %19 : tensor<3x3xi32>
    %21 = stablehlo.compare EQ, %20, %18, SIGNED : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
    %22 = stablehlo.convert %21 : (tensor<3x3xi1>) -> tensor<3x3xf32>
    %23 = call @cholesky(%22) : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %24 = call @round(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %25 = stablehlo.is_finite %arg0 : (tensor<4xf32>) -> tensor<4xi1>
    %26 = stablehlo.optimization_barrier %arg0 : tensor<4xf32>
    %27 = chlo.sinh %arg0 : tensor<4xf32> -> tensor<4xf32>
    %28 = chlo.atan %arg0 : tensor<4xf32> -> tensor<4xf32>
    %cst_3 = stablehlo.constant dense<2.500000e+00> : tensor<f32>
    %29 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %30 = stablehlo.power %arg0, %29 : tensor<4xf32>
    %cst_4 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %31 = call @remainder(%arg0, %cst_4) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    return %0, %1, %2, %3, %4, %10, %values, %indices, %11, %14, %15, %16, %23, %24, %25, %26, %27, %28, %30, %31 : tensor<4xf32>, tensor<4xf32>, tensor<7xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4x4xf32>, tensor<2xf32>, tensor<2xi32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3x3xf32>, tensor<4xf32>, tensor<4xi1>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  }
  func.func private @cumsum(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = call @cumsum_0(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func private @cumsum_0(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<f32>
    %1 = "stablehlo.reduce_window"(%arg0, %0) <{base_dilations = array<i64: 1>, padding = dense<[[3, 0]]> : tensor<1x2xi64>, window_dilations = array<i64: 1>, window_dimensions = array<i64: 4>, window_strides = array<i64: 1>}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %2 = stablehlo.add %arg1, %arg2 : tensor<f32>
      stablehlo.return %2 : tensor<f32>
    }) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
  func.func private @clip(%arg0: tensor<4xf32>, %arg1: tensor<i32>, %arg2: tensor<i32>) -> tensor<4xf32> {
    %0 = stablehlo.convert %arg1 : (tensor<i32>) -> tensor<f32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %2 = stablehlo.maximum %1, %arg0 : tensor<4xf32>
    %3 = stablehlo.convert %arg2 : (tensor<i32>) -> tensor<f32>
    %4 = stablehlo.broadcast_in_dim %3, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %5 = stablehlo.minimum %4, %2 : tensor<4xf32>
    return %5 : tensor<4xf32>
  }
  func.func private @_pad(%arg0: tensor<4xf32>, %arg1: tensor<i32>) -> tensor<7xf32> {
    %0 = stablehlo.convert %arg1 : (tensor<i32>) -> tensor<f32>
    %1 = stablehlo.pad %arg0, %0, low = [1], high = [2], interior = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<7xf32>
    return %1 : tensor<7xf32>
  }
  func.func private @_flip(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.reverse %arg0, dims = [0] : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func private @tril(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %0 = stablehlo.iota dim = 0 : tensor<4x4xi32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<4x4xi32>
    %2 = stablehlo.add %0, %1 : tensor<4x4xi32>
    %3 = stablehlo.iota dim = 1 : tensor<4x4xi32>
    %4 = stablehlo.compare GE, %2, %3, SIGNED : (tensor<4x4xi32>, tensor<4x4xi32>) -> tensor<4x4xi1>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
    %6 = stablehlo.select %4, %arg0, %5 : tensor<4x4xi1>, tensor<4x4xf32>
    return %6 : tensor<4x4xf32>
  }
  func.func private @cholesky(%arg0: tensor<3x3xf32>) -> tensor<3x3xf32> {
    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<3x3xf32>
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<3x3xf32>
    %3 = stablehlo.divide %1, %2 : tensor<3x3xf32>
    %4:2 = stablehlo.custom_call @lapack_spotrf_ffi(%3) {backend_config = "", mhlo.backend_config = {uplo = 76 : ui8}, mhlo.frontend_attributes = {num_batch_dims = "0"}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([k, l], []) {i=3, j=3, k=3, l=3}, custom>} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<i32>)
    %c = stablehlo.constant dense<0> : tensor<i32>
    %5 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<i32>
    %6 = stablehlo.compare EQ, %4#1, %5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %7 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<i1>) -> tensor<1x1xi1>
    %cst_0 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %8 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<3x3xf32>
    %9 = stablehlo.broadcast_in_dim %7, dims = [0, 1] : (tensor<1x1xi1>) -> tensor<3x3xi1>
    %10 = stablehlo.select %9, %4#0, %8 : tensor<3x3xi1>, tensor<3x3xf32>
    %11 = stablehlo.iota dim = 0 : tensor<3x3xi32>
    %c_1 = stablehlo.constant dense<0> : tensor<i32>
    %12 = stablehlo.broadcast_in_dim %c_1, dims = [] : (tensor<i32>) -> tensor<3x3xi32>
    %13 = stablehlo.add %11, %12 : tensor<3x3xi32>
    %14 = stablehlo.iota dim = 1 : tensor<3x3xi32>
    %15 = stablehlo.compare GE, %13, %14, SIGNED : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %16 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<3x3xf32>
    %17 = stablehlo.select %15, %10, %16 : tensor<3x3xi1>, tensor<3x3xf32>
    return %17 : tensor<3x3xf32>
  }
  func.func private @round(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.round_nearest_even %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func private @remainder(%arg0: tensor<4xf32>, %arg1: tensor<f32>) -> tensor<4xf32> {
    %0 = stablehlo.convert %arg1 : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %2 = stablehlo.remainder %arg0, %1 : tensor<4xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %4 = stablehlo.compare NE, %2, %3, FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %6 = stablehlo.compare LT, %2, %5, FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %7 = stablehlo.compare LT, %0, %cst_1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %8 = stablehlo.broadcast_in_dim %7, dims = [] : (tensor<i1>) -> tensor<4xi1>
    %9 = stablehlo.compare NE, %6, %8, UNSIGNED : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %10 = stablehlo.and %9, %4 : tensor<4xi1>
    %11 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %12 = stablehlo.add %2, %11 : tensor<4xf32>
    %13 = stablehlo.select %10, %12, %2 : tensor<4xi1>, tensor<4xf32>
    return %13 : tensor<4xf32>
  }
}

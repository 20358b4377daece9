// jax.jit(shard_map(f, mesh of 8 'd', P('d') -> P('d'))) with f(x) = psum(2 * cholesky(x[0] @ x[0].T + 4 I), 'd')[None],
// lowered by JAX 0.10.2 on CPU: a LAPACK custom call (lapack_spotrf_ffi, in @cholesky) before an all_reduce.
module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<8x4x4xf32>) -> (tensor<8x4x4xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"d"}, {}, {}]>] out_shardings=[<@mesh, [{"d"}, {}, {}]>] manual_axes={"d"} (%arg1: tensor<1x4x4xf32>) {
      %1 = stablehlo.reshape %arg1 : (tensor<1x4x4xf32>) -> tensor<4x4xf32>
      %2 = stablehlo.reshape %arg1 : (tensor<1x4x4xf32>) -> tensor<4x4xf32>
      %3 = stablehlo.transpose %2, dims = [1, 0] : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %4 = stablehlo.dot_general %1, %3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      %5 = stablehlo.iota dim = 0 : tensor<4x4xi32>
      %6 = stablehlo.iota dim = 1 : tensor<4x4xi32>
      %c = stablehlo.constant dense<0> : tensor<i32>
      %7 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<4x4xi32>
      %8 = stablehlo.add %5, %7 : tensor<4x4xi32>
      %9 = stablehlo.compare EQ, %8, %6, SIGNED : (tensor<4x4xi32>, tensor<4x4xi32>) -> tensor<4x4xi1>
      %10 = stablehlo.convert %9 : (tensor<4x4xi1>) -> tensor<4x4xf32>
      %cst = stablehlo.constant dense<4.000000e+00> : tensor<f32>
      %11 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
      %12 = stablehlo.multiply %11, %10 : tensor<4x4xf32>
      %13 = stablehlo.add %4, %12 : tensor<4x4xf32>
      %14 = func.call @cholesky(%13) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
      %15 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
      %16 = stablehlo.multiply %14, %15 : tensor<4x4xf32>
      %17 = "stablehlo.all_reduce"(%16) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %19 = stablehlo.add %arg2, %arg3 : tensor<f32>
        stablehlo.return %19 : tensor<f32>
      }) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %18 = stablehlo.broadcast_in_dim %17, dims = [1, 2] : (tensor<4x4xf32>) -> tensor<1x4x4xf32>
      sdy.return %18 : tensor<1x4x4xf32>
    } : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
    return %0 : tensor<8x4x4xf32>
  }
  func.func private @cholesky(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<4x4xf32>
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
    %3 = stablehlo.divide %1, %2 : tensor<4x4xf32>
    %4:2 = stablehlo.custom_call @lapack_spotrf_ffi(%3) {backend_config = "", mhlo.backend_config = {uplo = 76 : ui8}, mhlo.frontend_attributes = {num_batch_dims = "0"}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([k, l], []) {i=4, j=4, k=4, l=4}, custom>} : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<i32>)
    %c = stablehlo.constant dense<0> : tensor<i32>
    %5 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<i32>
    %6 = stablehlo.compare EQ, %4#1, %5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %7 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<i1>) -> tensor<1x1xi1>
    %cst_0 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %8 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
    %9 = stablehlo.broadcast_in_dim %7, dims = [0, 1] : (tensor<1x1xi1>) -> tensor<4x4xi1>
    %10 = stablehlo.select %9, %4#0, %8 : tensor<4x4xi1>, tensor<4x4xf32>
    %11 = stablehlo.iota dim = 0 : tensor<4x4xi32>
    %c_1 = stablehlo.constant dense<0> : tensor<i32>
    %12 = stablehlo.broadcast_in_dim %c_1, dims = [] : (tensor<i32>) -> tensor<4x4xi32>
    %13 = stablehlo.add %11, %12 : tensor<4x4xi32>
    %14 = stablehlo.iota dim = 1 : tensor<4x4xi32>
    %15 = stablehlo.compare GE, %13, %14, SIGNED : (tensor<4x4xi32>, tensor<4x4xi32>) -> tensor<4x4xi1>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %16 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
    %17 = stablehlo.select %15, %10, %16 : tensor<4x4xi1>, tensor<4x4xf32>
    return %17 : tensor<4x4xf32>
  }
}


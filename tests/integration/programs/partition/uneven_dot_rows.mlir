module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}, {name = "y", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<10x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<10x5xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<6x5xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.exponential %arg0 : tensor<10x6xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"y"}, {}]> : tensor<10x6xf32>
    %2 = stablehlo.transpose %1, dims = [1, 0] : (tensor<10x6xf32>) -> tensor<6x10xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %3 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<10x5xf32>
    %4 = stablehlo.add %arg1, %3 : tensor<10x5xf32>
    %5 = stablehlo.dot_general %2, %4, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<6x10xf32>, tensor<10x5xf32>) -> tensor<6x5xf32>
    return %5 : tensor<6x5xf32>
  }
}

module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}, {name = "y", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<10x12xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<10x10xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.tanh %arg0 : tensor<10x12xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"y"}, {}]> : tensor<10x12xf32>
    %2 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<10x12xf32>) -> tensor<12x10xf32>
    %3 = stablehlo.dot_general %1, %2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<10x12xf32>, tensor<12x10xf32>) -> tensor<10x10xf32>
    return %3 : tensor<10x10xf32>
  }
}

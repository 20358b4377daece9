module @jit__lambda attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<256x8192xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"d"}]>}) -> (tensor<256x4xf32> {jax.result_info = "result[0]"}, tensor<256x4xi32> {jax.result_info = "result[1]"}) {
    %values, %indices = chlo.top_k(%arg0, k = 4) : tensor<256x8192xf32> -> (tensor<256x4xf32>, tensor<256x4xi32>)
    return %values, %indices : tensor<256x4xf32>, tensor<256x4xi32>
  }
}

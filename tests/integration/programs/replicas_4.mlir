// mhlo.num_replicas = 4, written by hand (pmap-style replicas): every replica squares its own
// per-replica value and adds its replica id.
module @replicas attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {
    %r = stablehlo.replica_id : tensor<ui32>
    %rf = stablehlo.convert %r : (tensor<ui32>) -> tensor<f32>
    %b = stablehlo.broadcast_in_dim %rf, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %sq = stablehlo.multiply %a, %a : tensor<3xf32>
    %s = stablehlo.add %sq, %b : tensor<3xf32>
    return %s : tensor<3xf32>
  }
}

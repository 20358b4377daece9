// Collectives between replicas (mhlo.num_replicas = 8, written by hand) whose groups cross the
// workers and interleave: all_reduce, all_gather, collective_broadcast, replica_id.
module @replica_colls attributes {mhlo.num_replicas = 8 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<16xf32>, tensor<4xf32>, tensor<ui32>) {
    %0 = "stablehlo.all_reduce"(%a) ({
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %s = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>} : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "stablehlo.all_gather"(%a) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 5, 2, 7], [4, 1, 6, 3]]> : tensor<2x4xi64>} : (tensor<4xf32>) -> tensor<16xf32>
    %2 = "stablehlo.collective_broadcast"(%a) {replica_groups = dense<[[3, 0, 1, 2], [7, 4, 5, 6]]> : tensor<2x4xi64>} : (tensor<4xf32>) -> tensor<4xf32>
    %3 = stablehlo.replica_id : tensor<ui32>
    return %0, %1, %2, %3 : tensor<4xf32>, tensor<16xf32>, tensor<4xf32>, tensor<ui32>
  }
}

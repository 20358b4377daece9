// mhlo.num_replicas = 4, written by hand: all_reduce (sum) over the four replicas of a tiny
// int32, a 400 KB int32 and a 400 KB f32 operand (above LOOM_DP_RD_MAX: the ring between
// hosts), and max of the int32 one; for comparing the flat and hierarchical data-plane
// algorithms on real workers (test_collectives_hier.py).
module @allreduce4 attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%t: tensor<5xi32>, %a: tensor<100000xi32>, %f: tensor<100000xf32>)
      -> (tensor<5xi32>, tensor<100000xi32>, tensor<100000xf32>, tensor<100000xi32>) {
    %0 = "stablehlo.all_reduce"(%t) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%x: tensor<i32>, %y: tensor<i32>):
      %s = stablehlo.add %x, %y : tensor<i32>
      stablehlo.return %s : tensor<i32>
    }) : (tensor<5xi32>) -> tensor<5xi32>
    %1 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%x: tensor<i32>, %y: tensor<i32>):
      %s = stablehlo.add %x, %y : tensor<i32>
      stablehlo.return %s : tensor<i32>
    }) : (tensor<100000xi32>) -> tensor<100000xi32>
    %2 = "stablehlo.all_reduce"(%f) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<100000xf32>) -> tensor<100000xf32>
    %3 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%x: tensor<i32>, %y: tensor<i32>):
      %s = stablehlo.maximum %x, %y : tensor<i32>
      stablehlo.return %s : tensor<i32>
    }) : (tensor<100000xi32>) -> tensor<100000xi32>
    return %0, %1, %2, %3 : tensor<5xi32>, tensor<100000xi32>, tensor<100000xf32>, tensor<100000xi32>
  }
}

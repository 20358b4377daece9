// A launch that never ends: each of 8 processes loops forever (the condition is always true),
// taking the max of its counter with every other process's in each iteration (an all_reduce
// across both workers). Only cancelling it (or ending its session) stops it. The result has
// add_one_8.mlir's input type, so a launch can consume it.
module @forever attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func public @main() -> tensor<16xi32> {
    %0 = sdy.manual_computation() in_shardings=[] out_shardings=[<@mesh, [{"d"}]>] manual_axes={"d"} () {
      %zero = stablehlo.constant dense<0> : tensor<i32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %r = stablehlo.while(%i = %zero) : tensor<i32>
        cond {
          %t = stablehlo.constant dense<true> : tensor<i1>
          stablehlo.return %t : tensor<i1>
        } do {
          %j = stablehlo.xor %i, %one : tensor<i32>
          %m = "stablehlo.all_reduce"(%j) ({
          ^bb0(%a: tensor<i32>, %b: tensor<i32>):
            %x = stablehlo.maximum %a, %b : tensor<i32>
            stablehlo.return %x : tensor<i32>
          }) {replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids,
              channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<i32>) -> tensor<i32>
          stablehlo.return %m : tensor<i32>
        }
      %b = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<i32>) -> tensor<2xi32>
      sdy.return %b : tensor<2xi32>
    } : () -> tensor<16xi32>
    return %0 : tensor<16xi32>
  }
}

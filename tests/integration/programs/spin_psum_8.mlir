// Each of 8 processes counts to N in a while loop, then they all_reduce the counts: a launch
// that is busy for a while and then needs every device (the fault tests kill a worker meanwhile).
module @spin_psum attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func public @main() -> tensor<8xi64> {
    %0 = sdy.manual_computation() in_shardings=[] out_shardings=[<@mesh, [{"d"}]>] manual_axes={"d"} () {
      %zero = stablehlo.constant dense<0> : tensor<i64>
      %one = stablehlo.constant dense<1> : tensor<i64>
      %n = stablehlo.constant dense<1000000> : tensor<i64>
      %r = stablehlo.while(%i = %zero) : tensor<i64>
        cond {
          %c = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>
          stablehlo.return %c : tensor<i1>
        } do {
          %j = stablehlo.add %i, %one : tensor<i64>
          stablehlo.return %j : tensor<i64>
        }
      %s = "stablehlo.all_reduce"(%r) ({
      ^bb0(%a: tensor<i64>, %b: tensor<i64>):
        %t = stablehlo.add %a, %b : tensor<i64>
        stablehlo.return %t : tensor<i64>
      }) {replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids,
          channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<i64>) -> tensor<i64>
      %b = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<i64>) -> tensor<1xi64>
      sdy.return %b : tensor<1xi64>
    } : () -> tensor<8xi64>
    return %0 : tensor<8xi64>
  }
}

// A launch that keeps every device busy for a while: each process counts to N in a
// while loop and returns the count (the fault tests kill a worker while it runs).
module @spin attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=4]>
  func.func public @main() -> tensor<4xi64> {
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
      %b = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<i64>) -> tensor<1xi64>
      sdy.return %b : tensor<1xi64>
    } : () -> tensor<4xi64>
    return %0 : tensor<4xi64>
  }
}

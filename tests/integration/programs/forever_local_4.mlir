// A launch that never ends and needs no other device: each of 4 processes counts around a
// while loop whose condition is always true. Only cancelling it (or ending its session) stops it.
module @forever_local attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=4]>
  func.func public @main() -> tensor<4xi32> {
    %0 = sdy.manual_computation() in_shardings=[] out_shardings=[<@mesh, [{"d"}]>] manual_axes={"d"} () {
      %zero = stablehlo.constant dense<0> : tensor<i32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %r = stablehlo.while(%i = %zero) : tensor<i32>
        cond {
          %t = stablehlo.constant dense<true> : tensor<i1>
          stablehlo.return %t : tensor<i1>
        } do {
          %j = stablehlo.xor %i, %one : tensor<i32>
          stablehlo.return %j : tensor<i32>
        }
      %b = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<i32>) -> tensor<1xi32>
      sdy.return %b : tensor<1xi32>
    } : () -> tensor<4xi32>
    return %0 : tensor<4xi32>
  }
}

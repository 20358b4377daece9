#map = 3 : i64
!tok = !stablehlo.token
module @m attributes {x = #map, y = array<i64: 1, -2>, z = array<i1: true>, s = "a\"b\0A", u, f = 0x7FC00000 : f32, t = tensor<2xf32>, r = #foo.bar<baz qux>} {
 func.func @f(%t: !tok) -> !tok {
 %0 = stablehlo.after_all %t, %t : !stablehlo.token
 return %0 : !stablehlo.token
 }
}
{-#
 dialect_resources: { builtin: { x: "0x01" } }
#-}

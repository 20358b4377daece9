func.func @f() {
 %0 = "stablehlo.case"(%i) ({
 ^bb0(%x: tensor<f32>):
 }) : (tensor<i32>) -> tensor<f32>

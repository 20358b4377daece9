func.func @main(%a: tensor<3xf32>, %i: tensor<3xi32>, %z: tensor<f32>, %j: tensor<i32>) -> tensor<i32> {
 %0:2 = stablehlo.reduce(%a init: %z), (%i init: %j) across dimensions = [0] : (tensor<3xf32>, tensor<3xi32>, tensor<f32>, tensor<i32>) -> (tensor<f32>, tensor<i32>)
  reducer(%p: tensor<f32>, %q: tensor<f32>) (%r: tensor<i32>, %s: tensor<i32>) {
  %m = stablehlo.maximum %p, %q : tensor<f32>
  %n = stablehlo.minimum %r, %s : tensor<i32>
  stablehlo.return %m, %n : tensor<f32>, tensor<i32>
 }
 return %0#1 : tensor<i32>
}

func.func @f(%a: tensor<4xi4>) {
 return
}

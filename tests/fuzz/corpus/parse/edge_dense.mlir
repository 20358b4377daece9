func.func @main() -> tensor<2x2xcomplex<f32>> {
 %0 = stablehlo.constant dense<[[(1.0, 2.0), (0x7FC00000, -inf)], [(nan, 0.0), (1e-45, -0.0)]]> : tensor<2x2xcomplex<f32>>
 %1 = stablehlo.constant dense<"0x0000803F"> : tensor<3xf32>
 %2 = stablehlo.constant dense<[true, false]> : tensor<2xi1>
 return %0 : tensor<2x2xcomplex<f32>>
}

func.func @t() {
 %0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf64>
 check.expect_almost_eq_const %0, dense<[1.0, 2.0]> : tensor<2xf64> {tolerance = 0.1 : f64}
 check.expect_close %0, %0, max_ulp_difference = 3 : tensor<2xf64>, tensor<2xf64>
 check.expect_eq %0, %0 : tensor<2xf64>
 func.return
}

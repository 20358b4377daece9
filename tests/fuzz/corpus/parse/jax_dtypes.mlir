module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<3xf16>, %arg2: tensor<3xui8>, %arg3: tensor<3xcomplex<f32>>, %arg4: tensor<3xi8>) -> (tensor<3xbf16> {jax.result_info = "result[0]"}, tensor<3xf16> {jax.result_info = "result[1]"}, tensor<3xui8> {jax.result_info = "result[2]"}, tensor<3xf32> {jax.result_info = "result[3]"}, tensor<3xi1> {jax.result_info = "result[4]"}, tensor<3xi32> {jax.result_info = "result[5]"}, tensor<3xcomplex<f32>> {jax.result_info = "result[6]"}) {
    %0 = stablehlo.convert %arg0 : (tensor<3xf32>) -> tensor<3xbf16>
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<bf16>
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<bf16>) -> tensor<3xbf16>
    %2 = stablehlo.multiply %0, %1 : tensor<3xbf16>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f16>
    %3 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f16>) -> tensor<3xf16>
    %4 = stablehlo.add %arg1, %3 : tensor<3xf16>
    %5 = stablehlo.multiply %arg2, %arg2 : tensor<3xui8>
    %6 = stablehlo.abs %arg3 : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
    %c = stablehlo.constant dense<0> : tensor<i8>
    %7 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i8>) -> tensor<3xi8>
    %8 = stablehlo.compare GT, %arg4, %7, SIGNED : (tensor<3xi8>, tensor<3xi8>) -> tensor<3xi1>
    %9 = stablehlo.bitcast_convert %arg0 : (tensor<3xf32>) -> tensor<3xi32>
    %10 = call @fft(%arg3) : (tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
    return %2, %4, %5, %6, %8, %9, %10 : tensor<3xbf16>, tensor<3xf16>, tensor<3xui8>, tensor<3xf32>, tensor<3xi1>, tensor<3xi32>, tensor<3xcomplex<f32>>
  }
  func.func private @fft(%arg0: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
    %0 = stablehlo.fft %arg0, type = FFT, length = [3] : (tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
    return %0 : tensor<3xcomplex<f32>>
  }
}

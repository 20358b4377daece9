"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<3xf32>, tensor<3xf16>, tensor<3xui8>, tensor<3xcomplex<f32>>, tensor<3xi8>) -> (tensor<3xbf16>, tensor<3xf16>, tensor<3xui8>, tensor<3xf32>, tensor<3xi1>, tensor<3xi32>, tensor<3xcomplex<f32>>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}, {jax.result_info = "result[2]"}, {jax.result_info = "result[3]"}, {jax.result_info = "result[4]"}, {jax.result_info = "result[5]"}, {jax.result_info = "result[6]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg1: tensor<3xf32>, %arg2: tensor<3xf16>, %arg3: tensor<3xui8>, %arg4: tensor<3xcomplex<f32>>, %arg5: tensor<3xi8>):
    %1 = "stablehlo.convert"(%arg1) : (tensor<3xf32>) -> tensor<3xbf16>
    %2 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<bf16>}> : () -> tensor<bf16>
    %3 = "stablehlo.broadcast_in_dim"(%2) <{broadcast_dimensions = array<i64>}> : (tensor<bf16>) -> tensor<3xbf16>
    %4 = "stablehlo.multiply"(%1, %3) : (tensor<3xbf16>, tensor<3xbf16>) -> tensor<3xbf16>
    %5 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f16>}> : () -> tensor<f16>
    %6 = "stablehlo.broadcast_in_dim"(%5) <{broadcast_dimensions = array<i64>}> : (tensor<f16>) -> tensor<3xf16>
    %7 = "stablehlo.add"(%arg2, %6) : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xf16>
    %8 = "stablehlo.multiply"(%arg3, %arg3) : (tensor<3xui8>, tensor<3xui8>) -> tensor<3xui8>
    %9 = "stablehlo.abs"(%arg4) : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
    %10 = "stablehlo.constant"() <{value = dense<0> : tensor<i8>}> : () -> tensor<i8>
    %11 = "stablehlo.broadcast_in_dim"(%10) <{broadcast_dimensions = array<i64>}> : (tensor<i8>) -> tensor<3xi8>
    %12 = "stablehlo.compare"(%arg5, %11) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction GT>}> : (tensor<3xi8>, tensor<3xi8>) -> tensor<3xi1>
    %13 = "stablehlo.bitcast_convert"(%arg1) : (tensor<3xf32>) -> tensor<3xi32>
    %14 = "func.call"(%arg4) <{callee = @fft}> : (tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
    "func.return"(%4, %7, %8, %9, %12, %13, %14) : (tensor<3xbf16>, tensor<3xf16>, tensor<3xui8>, tensor<3xf32>, tensor<3xi1>, tensor<3xi32>, tensor<3xcomplex<f32>>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>, sym_name = "fft", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<3xcomplex<f32>>):
    %0 = "stablehlo.fft"(%arg0) <{fft_length = array<i64: 3>, fft_type = #stablehlo<fft_type FFT>}> : (tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
    "func.return"(%0) : (tensor<3xcomplex<f32>>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

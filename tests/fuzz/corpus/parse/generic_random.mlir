"builtin.module"() <{sym_name = "jit__lambda"}> ({
  "func.func"() <{function_type = (tensor<2xui32>) -> (tensor<3xf32>, tensor<2x2xf32>, tensor<4xi1>), res_attrs = [{jax.result_info = "result[0]"}, {jax.result_info = "result[1]"}, {jax.result_info = "result[2]"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg103: tensor<2xui32>):
    %340 = "func.call"(%arg103) <{callee = @_normal}> : (tensor<2xui32>) -> tensor<3xf32>
    %341 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %342 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %343 = "func.call"(%arg103, %341, %342) <{callee = @_uniform_0}> : (tensor<2xui32>, tensor<f32>, tensor<f32>) -> tensor<2x2xf32>
    %344 = "stablehlo.constant"() <{value = dense<5.000000e-01> : tensor<f32>}> : () -> tensor<f32>
    %345 = "func.call"(%arg103, %344) <{callee = @_bernoulli}> : (tensor<2xui32>, tensor<f32>) -> tensor<4xi1>
    "func.return"(%340, %343, %345) : (tensor<3xf32>, tensor<2x2xf32>, tensor<4xi1>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2xui32>) -> tensor<3xf32>, sym_name = "_normal", sym_visibility = "private"}> ({
  ^bb0(%arg102: tensor<2xui32>):
    %339 = "func.call"(%arg102) <{callee = @_normal_real}> : (tensor<2xui32>) -> tensor<3xf32>
    "func.return"(%339) : (tensor<3xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2xui32>) -> tensor<3xf32>, sym_name = "_normal_real", sym_visibility = "private"}> ({
  ^bb0(%arg101: tensor<2xui32>):
    %332 = "stablehlo.constant"() <{value = dense<-0.99999994> : tensor<f32>}> : () -> tensor<f32>
    %333 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %334 = "func.call"(%arg101, %332, %333) <{callee = @_uniform}> : (tensor<2xui32>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
    %335 = "chlo.erf_inv"(%334) : (tensor<3xf32>) -> tensor<3xf32>
    %336 = "stablehlo.constant"() <{value = dense<1.41421354> : tensor<f32>}> : () -> tensor<f32>
    %337 = "stablehlo.broadcast_in_dim"(%336) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3xf32>
    %338 = "stablehlo.multiply"(%337, %335) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "func.return"(%338) : (tensor<3xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2xui32>, tensor<f32>, tensor<f32>) -> tensor<3xf32>, sym_name = "_uniform", sym_visibility = "private"}> ({
  ^bb0(%arg98: tensor<2xui32>, %arg99: tensor<f32>, %arg100: tensor<f32>):
    %298 = "stablehlo.broadcast_in_dim"(%arg99) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1xf32>
    %299 = "stablehlo.broadcast_in_dim"(%arg100) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1xf32>
    %300 = "stablehlo.slice"(%arg98) <{limit_indices = array<i64: 1>, start_indices = array<i64: 0>, strides = array<i64: 1>}> : (tensor<2xui32>) -> tensor<1xui32>
    %301 = "stablehlo.reshape"(%300) : (tensor<1xui32>) -> tensor<ui32>
    %302 = "stablehlo.slice"(%arg98) <{limit_indices = array<i64: 2>, start_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<2xui32>) -> tensor<1xui32>
    %303 = "stablehlo.reshape"(%302) : (tensor<1xui32>) -> tensor<ui32>
    %304 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> : () -> tensor<3xui64>
    %305 = "stablehlo.constant"() <{value = dense<1> : tensor<ui64>}> : () -> tensor<ui64>
    %306 = "stablehlo.broadcast_in_dim"(%305) <{broadcast_dimensions = array<i64>}> : (tensor<ui64>) -> tensor<3xui64>
    %307 = "stablehlo.multiply"(%306, %304) : (tensor<3xui64>, tensor<3xui64>) -> tensor<3xui64>
    %308 = "stablehlo.constant"() <{value = dense<32> : tensor<ui64>}> : () -> tensor<ui64>
    %309 = "stablehlo.broadcast_in_dim"(%308) <{broadcast_dimensions = array<i64>}> : (tensor<ui64>) -> tensor<3xui64>
    %310 = "stablehlo.shift_right_logical"(%307, %309) : (tensor<3xui64>, tensor<3xui64>) -> tensor<3xui64>
    %311 = "stablehlo.convert"(%307) : (tensor<3xui64>) -> tensor<3xui32>
    %312 = "stablehlo.convert"(%310) : (tensor<3xui64>) -> tensor<3xui32>
    %313:2 = "func.call"(%301, %303, %312, %311) <{callee = @threefry2x32}> : (tensor<ui32>, tensor<ui32>, tensor<3xui32>, tensor<3xui32>) -> (tensor<3xui32>, tensor<3xui32>)
    %314 = "stablehlo.xor"(%313#0, %313#1) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %315 = "stablehlo.constant"() <{value = dense<9> : tensor<ui32>}> : () -> tensor<ui32>
    %316 = "stablehlo.broadcast_in_dim"(%315) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %317 = "stablehlo.shift_right_logical"(%314, %316) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %318 = "stablehlo.constant"() <{value = dense<1065353216> : tensor<ui32>}> : () -> tensor<ui32>
    %319 = "stablehlo.broadcast_in_dim"(%318) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %320 = "stablehlo.or"(%317, %319) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %321 = "stablehlo.bitcast_convert"(%320) : (tensor<3xui32>) -> tensor<3xf32>
    %322 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %323 = "stablehlo.broadcast_in_dim"(%322) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3xf32>
    %324 = "stablehlo.subtract"(%321, %323) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %325 = "stablehlo.subtract"(%299, %298) : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
    %326 = "stablehlo.broadcast_in_dim"(%325) <{broadcast_dimensions = array<i64: 0>}> : (tensor<1xf32>) -> tensor<3xf32>
    %327 = "stablehlo.multiply"(%324, %326) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %328 = "stablehlo.broadcast_in_dim"(%298) <{broadcast_dimensions = array<i64: 0>}> : (tensor<1xf32>) -> tensor<3xf32>
    %329 = "stablehlo.add"(%327, %328) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %330 = "stablehlo.broadcast_in_dim"(%298) <{broadcast_dimensions = array<i64: 0>}> : (tensor<1xf32>) -> tensor<3xf32>
    %331 = "stablehlo.maximum"(%330, %329) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "func.return"(%331) : (tensor<3xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<ui32>, tensor<ui32>, tensor<3xui32>, tensor<3xui32>) -> (tensor<3xui32>, tensor<3xui32>), sym_name = "threefry2x32", sym_visibility = "private"}> ({
  ^bb0(%arg76: tensor<ui32>, %arg77: tensor<ui32>, %arg78: tensor<3xui32>, %arg79: tensor<3xui32>):
    %281 = "stablehlo.constant"() <{value = dense<[13, 15, 26, 6]> : tensor<4xui32>}> : () -> tensor<4xui32>
    %282 = "stablehlo.constant"() <{value = dense<[17, 29, 16, 24]> : tensor<4xui32>}> : () -> tensor<4xui32>
    %283 = "stablehlo.xor"(%arg76, %arg77) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %284 = "stablehlo.constant"() <{value = dense<466688986> : tensor<ui32>}> : () -> tensor<ui32>
    %285 = "stablehlo.xor"(%283, %284) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %286 = "stablehlo.broadcast_in_dim"(%arg76) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %287 = "stablehlo.add"(%arg78, %286) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %288 = "stablehlo.broadcast_in_dim"(%arg77) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %289 = "stablehlo.add"(%arg79, %288) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %290 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %291 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %292:9 = "stablehlo.while"(%291, %290, %287, %289, %arg77, %285, %arg76, %281, %282) ({
    ^bb0(%arg89: tensor<i32>, %arg90: tensor<i32>, %arg91: tensor<3xui32>, %arg92: tensor<3xui32>, %arg93: tensor<ui32>, %arg94: tensor<ui32>, %arg95: tensor<ui32>, %arg96: tensor<4xui32>, %arg97: tensor<4xui32>):
      %296 = "stablehlo.constant"() <{value = dense<5> : tensor<i32>}> : () -> tensor<i32>
      %297 = "stablehlo.compare"(%arg89, %296) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
      "stablehlo.return"(%297) : (tensor<i1>) -> ()
    }, {
    ^bb0(%arg80: tensor<i32>, %arg81: tensor<i32>, %arg82: tensor<3xui32>, %arg83: tensor<3xui32>, %arg84: tensor<ui32>, %arg85: tensor<ui32>, %arg86: tensor<ui32>, %arg87: tensor<4xui32>, %arg88: tensor<4xui32>):
      %293:8 = "func.call"(%arg81, %arg82, %arg83, %arg84, %arg85, %arg86, %arg87, %arg88) <{callee = @closed_call}> : (tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>)
      %294 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
      %295 = "stablehlo.add"(%arg80, %294) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      "stablehlo.return"(%295, %293#0, %293#1, %293#2, %293#3, %293#4, %293#5, %293#6, %293#7) : (tensor<i32>, tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> ()
    }) : (tensor<i32>, tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>)
    "func.return"(%292#2, %292#3) : (tensor<3xui32>, tensor<3xui32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>), sym_name = "closed_call", sym_visibility = "private"}> ({
  ^bb0(%arg68: tensor<i32>, %arg69: tensor<3xui32>, %arg70: tensor<3xui32>, %arg71: tensor<ui32>, %arg72: tensor<ui32>, %arg73: tensor<ui32>, %arg74: tensor<4xui32>, %arg75: tensor<4xui32>):
    %226 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %227 = "stablehlo.add"(%arg68, %226) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %228 = "stablehlo.slice"(%arg74) <{limit_indices = array<i64: 1>, start_indices = array<i64: 0>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %229 = "stablehlo.reshape"(%228) : (tensor<1xui32>) -> tensor<ui32>
    %230 = "stablehlo.add"(%arg69, %arg70) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %231 = "stablehlo.broadcast_in_dim"(%229) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %232 = "stablehlo.shift_left"(%arg70, %231) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %233 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %234 = "stablehlo.subtract"(%233, %229) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %235 = "stablehlo.broadcast_in_dim"(%234) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %236 = "stablehlo.shift_right_logical"(%arg70, %235) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %237 = "stablehlo.or"(%232, %236) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %238 = "stablehlo.xor"(%230, %237) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %239 = "stablehlo.slice"(%arg74) <{limit_indices = array<i64: 2>, start_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %240 = "stablehlo.reshape"(%239) : (tensor<1xui32>) -> tensor<ui32>
    %241 = "stablehlo.add"(%230, %238) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %242 = "stablehlo.broadcast_in_dim"(%240) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %243 = "stablehlo.shift_left"(%238, %242) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %244 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %245 = "stablehlo.subtract"(%244, %240) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %246 = "stablehlo.broadcast_in_dim"(%245) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %247 = "stablehlo.shift_right_logical"(%238, %246) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %248 = "stablehlo.or"(%243, %247) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %249 = "stablehlo.xor"(%241, %248) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %250 = "stablehlo.slice"(%arg74) <{limit_indices = array<i64: 3>, start_indices = array<i64: 2>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %251 = "stablehlo.reshape"(%250) : (tensor<1xui32>) -> tensor<ui32>
    %252 = "stablehlo.add"(%241, %249) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %253 = "stablehlo.broadcast_in_dim"(%251) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %254 = "stablehlo.shift_left"(%249, %253) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %255 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %256 = "stablehlo.subtract"(%255, %251) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %257 = "stablehlo.broadcast_in_dim"(%256) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %258 = "stablehlo.shift_right_logical"(%249, %257) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %259 = "stablehlo.or"(%254, %258) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %260 = "stablehlo.xor"(%252, %259) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %261 = "stablehlo.slice"(%arg74) <{limit_indices = array<i64: 4>, start_indices = array<i64: 3>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %262 = "stablehlo.reshape"(%261) : (tensor<1xui32>) -> tensor<ui32>
    %263 = "stablehlo.add"(%252, %260) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %264 = "stablehlo.broadcast_in_dim"(%262) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %265 = "stablehlo.shift_left"(%260, %264) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %266 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %267 = "stablehlo.subtract"(%266, %262) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %268 = "stablehlo.broadcast_in_dim"(%267) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %269 = "stablehlo.shift_right_logical"(%260, %268) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %270 = "stablehlo.or"(%265, %269) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %271 = "stablehlo.xor"(%263, %270) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %272 = "stablehlo.broadcast_in_dim"(%arg71) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %273 = "stablehlo.add"(%263, %272) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %274 = "stablehlo.broadcast_in_dim"(%arg72) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %275 = "stablehlo.add"(%271, %274) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    %276 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %277 = "stablehlo.add"(%arg68, %276) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %278 = "stablehlo.convert"(%277) : (tensor<i32>) -> tensor<ui32>
    %279 = "stablehlo.broadcast_in_dim"(%278) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<3xui32>
    %280 = "stablehlo.add"(%275, %279) : (tensor<3xui32>, tensor<3xui32>) -> tensor<3xui32>
    "func.return"(%227, %273, %280, %arg72, %arg73, %arg71, %arg75, %arg74) : (tensor<i32>, tensor<3xui32>, tensor<3xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2xui32>, tensor<f32>, tensor<f32>) -> tensor<2x2xf32>, sym_name = "_uniform_0", sym_visibility = "private"}> ({
  ^bb0(%arg65: tensor<2xui32>, %arg66: tensor<f32>, %arg67: tensor<f32>):
    %185 = "stablehlo.convert"(%arg66) : (tensor<f32>) -> tensor<f32>
    %186 = "stablehlo.convert"(%arg67) : (tensor<f32>) -> tensor<f32>
    %187 = "stablehlo.broadcast_in_dim"(%185) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1x1xf32>
    %188 = "stablehlo.broadcast_in_dim"(%186) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1x1xf32>
    %189 = "stablehlo.slice"(%arg65) <{limit_indices = array<i64: 1>, start_indices = array<i64: 0>, strides = array<i64: 1>}> : (tensor<2xui32>) -> tensor<1xui32>
    %190 = "stablehlo.reshape"(%189) : (tensor<1xui32>) -> tensor<ui32>
    %191 = "stablehlo.slice"(%arg65) <{limit_indices = array<i64: 2>, start_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<2xui32>) -> tensor<1xui32>
    %192 = "stablehlo.reshape"(%191) : (tensor<1xui32>) -> tensor<ui32>
    %193 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> : () -> tensor<2x2xui64>
    %194 = "stablehlo.iota"() <{iota_dimension = 1 : i64}> : () -> tensor<2x2xui64>
    %195 = "stablehlo.constant"() <{value = dense<2> : tensor<ui64>}> : () -> tensor<ui64>
    %196 = "stablehlo.broadcast_in_dim"(%195) <{broadcast_dimensions = array<i64>}> : (tensor<ui64>) -> tensor<2x2xui64>
    %197 = "stablehlo.multiply"(%196, %193) : (tensor<2x2xui64>, tensor<2x2xui64>) -> tensor<2x2xui64>
    %198 = "stablehlo.constant"() <{value = dense<1> : tensor<ui64>}> : () -> tensor<ui64>
    %199 = "stablehlo.broadcast_in_dim"(%198) <{broadcast_dimensions = array<i64>}> : (tensor<ui64>) -> tensor<2x2xui64>
    %200 = "stablehlo.multiply"(%199, %194) : (tensor<2x2xui64>, tensor<2x2xui64>) -> tensor<2x2xui64>
    %201 = "stablehlo.add"(%197, %200) : (tensor<2x2xui64>, tensor<2x2xui64>) -> tensor<2x2xui64>
    %202 = "stablehlo.constant"() <{value = dense<32> : tensor<ui64>}> : () -> tensor<ui64>
    %203 = "stablehlo.broadcast_in_dim"(%202) <{broadcast_dimensions = array<i64>}> : (tensor<ui64>) -> tensor<2x2xui64>
    %204 = "stablehlo.shift_right_logical"(%201, %203) : (tensor<2x2xui64>, tensor<2x2xui64>) -> tensor<2x2xui64>
    %205 = "stablehlo.convert"(%201) : (tensor<2x2xui64>) -> tensor<2x2xui32>
    %206 = "stablehlo.convert"(%204) : (tensor<2x2xui64>) -> tensor<2x2xui32>
    %207:2 = "func.call"(%190, %192, %206, %205) <{callee = @threefry2x32_1}> : (tensor<ui32>, tensor<ui32>, tensor<2x2xui32>, tensor<2x2xui32>) -> (tensor<2x2xui32>, tensor<2x2xui32>)
    %208 = "stablehlo.xor"(%207#0, %207#1) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %209 = "stablehlo.constant"() <{value = dense<9> : tensor<ui32>}> : () -> tensor<ui32>
    %210 = "stablehlo.broadcast_in_dim"(%209) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %211 = "stablehlo.shift_right_logical"(%208, %210) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %212 = "stablehlo.constant"() <{value = dense<1065353216> : tensor<ui32>}> : () -> tensor<ui32>
    %213 = "stablehlo.broadcast_in_dim"(%212) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %214 = "stablehlo.or"(%211, %213) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %215 = "stablehlo.bitcast_convert"(%214) : (tensor<2x2xui32>) -> tensor<2x2xf32>
    %216 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %217 = "stablehlo.broadcast_in_dim"(%216) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x2xf32>
    %218 = "stablehlo.subtract"(%215, %217) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %219 = "stablehlo.subtract"(%188, %187) : (tensor<1x1xf32>, tensor<1x1xf32>) -> tensor<1x1xf32>
    %220 = "stablehlo.broadcast_in_dim"(%219) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x1xf32>) -> tensor<2x2xf32>
    %221 = "stablehlo.multiply"(%218, %220) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %222 = "stablehlo.broadcast_in_dim"(%187) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x1xf32>) -> tensor<2x2xf32>
    %223 = "stablehlo.add"(%221, %222) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %224 = "stablehlo.broadcast_in_dim"(%187) <{broadcast_dimensions = array<i64: 0, 1>}> : (tensor<1x1xf32>) -> tensor<2x2xf32>
    %225 = "stablehlo.maximum"(%224, %223) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    "func.return"(%225) : (tensor<2x2xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<ui32>, tensor<ui32>, tensor<2x2xui32>, tensor<2x2xui32>) -> (tensor<2x2xui32>, tensor<2x2xui32>), sym_name = "threefry2x32_1", sym_visibility = "private"}> ({
  ^bb0(%arg43: tensor<ui32>, %arg44: tensor<ui32>, %arg45: tensor<2x2xui32>, %arg46: tensor<2x2xui32>):
    %168 = "stablehlo.constant"() <{value = dense<[13, 15, 26, 6]> : tensor<4xui32>}> : () -> tensor<4xui32>
    %169 = "stablehlo.constant"() <{value = dense<[17, 29, 16, 24]> : tensor<4xui32>}> : () -> tensor<4xui32>
    %170 = "stablehlo.xor"(%arg43, %arg44) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %171 = "stablehlo.constant"() <{value = dense<466688986> : tensor<ui32>}> : () -> tensor<ui32>
    %172 = "stablehlo.xor"(%170, %171) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %173 = "stablehlo.broadcast_in_dim"(%arg43) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %174 = "stablehlo.add"(%arg45, %173) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %175 = "stablehlo.broadcast_in_dim"(%arg44) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %176 = "stablehlo.add"(%arg46, %175) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %177 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %178 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %179:9 = "stablehlo.while"(%178, %177, %174, %176, %arg44, %172, %arg43, %168, %169) ({
    ^bb0(%arg56: tensor<i32>, %arg57: tensor<i32>, %arg58: tensor<2x2xui32>, %arg59: tensor<2x2xui32>, %arg60: tensor<ui32>, %arg61: tensor<ui32>, %arg62: tensor<ui32>, %arg63: tensor<4xui32>, %arg64: tensor<4xui32>):
      %183 = "stablehlo.constant"() <{value = dense<5> : tensor<i32>}> : () -> tensor<i32>
      %184 = "stablehlo.compare"(%arg56, %183) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
      "stablehlo.return"(%184) : (tensor<i1>) -> ()
    }, {
    ^bb0(%arg47: tensor<i32>, %arg48: tensor<i32>, %arg49: tensor<2x2xui32>, %arg50: tensor<2x2xui32>, %arg51: tensor<ui32>, %arg52: tensor<ui32>, %arg53: tensor<ui32>, %arg54: tensor<4xui32>, %arg55: tensor<4xui32>):
      %180:8 = "func.call"(%arg48, %arg49, %arg50, %arg51, %arg52, %arg53, %arg54, %arg55) <{callee = @closed_call_2}> : (tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>)
      %181 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
      %182 = "stablehlo.add"(%arg47, %181) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      "stablehlo.return"(%182, %180#0, %180#1, %180#2, %180#3, %180#4, %180#5, %180#6, %180#7) : (tensor<i32>, tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> ()
    }) : (tensor<i32>, tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>)
    "func.return"(%179#2, %179#3) : (tensor<2x2xui32>, tensor<2x2xui32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>), sym_name = "closed_call_2", sym_visibility = "private"}> ({
  ^bb0(%arg35: tensor<i32>, %arg36: tensor<2x2xui32>, %arg37: tensor<2x2xui32>, %arg38: tensor<ui32>, %arg39: tensor<ui32>, %arg40: tensor<ui32>, %arg41: tensor<4xui32>, %arg42: tensor<4xui32>):
    %113 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %114 = "stablehlo.add"(%arg35, %113) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %115 = "stablehlo.slice"(%arg41) <{limit_indices = array<i64: 1>, start_indices = array<i64: 0>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %116 = "stablehlo.reshape"(%115) : (tensor<1xui32>) -> tensor<ui32>
    %117 = "stablehlo.add"(%arg36, %arg37) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %118 = "stablehlo.broadcast_in_dim"(%116) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %119 = "stablehlo.shift_left"(%arg37, %118) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %120 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %121 = "stablehlo.subtract"(%120, %116) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %122 = "stablehlo.broadcast_in_dim"(%121) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %123 = "stablehlo.shift_right_logical"(%arg37, %122) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %124 = "stablehlo.or"(%119, %123) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %125 = "stablehlo.xor"(%117, %124) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %126 = "stablehlo.slice"(%arg41) <{limit_indices = array<i64: 2>, start_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %127 = "stablehlo.reshape"(%126) : (tensor<1xui32>) -> tensor<ui32>
    %128 = "stablehlo.add"(%117, %125) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %129 = "stablehlo.broadcast_in_dim"(%127) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %130 = "stablehlo.shift_left"(%125, %129) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %131 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %132 = "stablehlo.subtract"(%131, %127) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %133 = "stablehlo.broadcast_in_dim"(%132) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %134 = "stablehlo.shift_right_logical"(%125, %133) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %135 = "stablehlo.or"(%130, %134) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %136 = "stablehlo.xor"(%128, %135) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %137 = "stablehlo.slice"(%arg41) <{limit_indices = array<i64: 3>, start_indices = array<i64: 2>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %138 = "stablehlo.reshape"(%137) : (tensor<1xui32>) -> tensor<ui32>
    %139 = "stablehlo.add"(%128, %136) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %140 = "stablehlo.broadcast_in_dim"(%138) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %141 = "stablehlo.shift_left"(%136, %140) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %142 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %143 = "stablehlo.subtract"(%142, %138) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %144 = "stablehlo.broadcast_in_dim"(%143) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %145 = "stablehlo.shift_right_logical"(%136, %144) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %146 = "stablehlo.or"(%141, %145) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %147 = "stablehlo.xor"(%139, %146) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %148 = "stablehlo.slice"(%arg41) <{limit_indices = array<i64: 4>, start_indices = array<i64: 3>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %149 = "stablehlo.reshape"(%148) : (tensor<1xui32>) -> tensor<ui32>
    %150 = "stablehlo.add"(%139, %147) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %151 = "stablehlo.broadcast_in_dim"(%149) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %152 = "stablehlo.shift_left"(%147, %151) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %153 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %154 = "stablehlo.subtract"(%153, %149) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %155 = "stablehlo.broadcast_in_dim"(%154) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %156 = "stablehlo.shift_right_logical"(%147, %155) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %157 = "stablehlo.or"(%152, %156) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %158 = "stablehlo.xor"(%150, %157) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %159 = "stablehlo.broadcast_in_dim"(%arg38) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %160 = "stablehlo.add"(%150, %159) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %161 = "stablehlo.broadcast_in_dim"(%arg39) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %162 = "stablehlo.add"(%158, %161) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    %163 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %164 = "stablehlo.add"(%arg35, %163) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %165 = "stablehlo.convert"(%164) : (tensor<i32>) -> tensor<ui32>
    %166 = "stablehlo.broadcast_in_dim"(%165) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<2x2xui32>
    %167 = "stablehlo.add"(%162, %166) : (tensor<2x2xui32>, tensor<2x2xui32>) -> tensor<2x2xui32>
    "func.return"(%114, %160, %167, %arg39, %arg40, %arg38, %arg42, %arg41) : (tensor<i32>, tensor<2x2xui32>, tensor<2x2xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2xui32>, tensor<f32>) -> tensor<4xi1>, sym_name = "_bernoulli", sym_visibility = "private"}> ({
  ^bb0(%arg33: tensor<2xui32>, %arg34: tensor<f32>):
    %108 = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %109 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %110 = "func.call"(%arg33, %108, %109) <{callee = @_uniform_3}> : (tensor<2xui32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>
    %111 = "stablehlo.broadcast_in_dim"(%arg34) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %112 = "stablehlo.compare"(%110, %111) <{compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    "func.return"(%112) : (tensor<4xi1>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<2xui32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>, sym_name = "_uniform_3", sym_visibility = "private"}> ({
  ^bb0(%arg30: tensor<2xui32>, %arg31: tensor<f32>, %arg32: tensor<f32>):
    %72 = "stablehlo.convert"(%arg31) : (tensor<f32>) -> tensor<f32>
    %73 = "stablehlo.convert"(%arg32) : (tensor<f32>) -> tensor<f32>
    %74 = "stablehlo.broadcast_in_dim"(%72) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1xf32>
    %75 = "stablehlo.broadcast_in_dim"(%73) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1xf32>
    %76 = "stablehlo.slice"(%arg30) <{limit_indices = array<i64: 1>, start_indices = array<i64: 0>, strides = array<i64: 1>}> : (tensor<2xui32>) -> tensor<1xui32>
    %77 = "stablehlo.reshape"(%76) : (tensor<1xui32>) -> tensor<ui32>
    %78 = "stablehlo.slice"(%arg30) <{limit_indices = array<i64: 2>, start_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<2xui32>) -> tensor<1xui32>
    %79 = "stablehlo.reshape"(%78) : (tensor<1xui32>) -> tensor<ui32>
    %80 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> : () -> tensor<4xui64>
    %81 = "stablehlo.constant"() <{value = dense<1> : tensor<ui64>}> : () -> tensor<ui64>
    %82 = "stablehlo.broadcast_in_dim"(%81) <{broadcast_dimensions = array<i64>}> : (tensor<ui64>) -> tensor<4xui64>
    %83 = "stablehlo.multiply"(%82, %80) : (tensor<4xui64>, tensor<4xui64>) -> tensor<4xui64>
    %84 = "stablehlo.constant"() <{value = dense<32> : tensor<ui64>}> : () -> tensor<ui64>
    %85 = "stablehlo.broadcast_in_dim"(%84) <{broadcast_dimensions = array<i64>}> : (tensor<ui64>) -> tensor<4xui64>
    %86 = "stablehlo.shift_right_logical"(%83, %85) : (tensor<4xui64>, tensor<4xui64>) -> tensor<4xui64>
    %87 = "stablehlo.convert"(%83) : (tensor<4xui64>) -> tensor<4xui32>
    %88 = "stablehlo.convert"(%86) : (tensor<4xui64>) -> tensor<4xui32>
    %89:2 = "func.call"(%77, %79, %88, %87) <{callee = @threefry2x32_4}> : (tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<4xui32>, tensor<4xui32>)
    %90 = "stablehlo.xor"(%89#0, %89#1) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %91 = "stablehlo.constant"() <{value = dense<9> : tensor<ui32>}> : () -> tensor<ui32>
    %92 = "stablehlo.broadcast_in_dim"(%91) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %93 = "stablehlo.shift_right_logical"(%90, %92) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %94 = "stablehlo.constant"() <{value = dense<1065353216> : tensor<ui32>}> : () -> tensor<ui32>
    %95 = "stablehlo.broadcast_in_dim"(%94) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %96 = "stablehlo.or"(%93, %95) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %97 = "stablehlo.bitcast_convert"(%96) : (tensor<4xui32>) -> tensor<4xf32>
    %98 = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %99 = "stablehlo.broadcast_in_dim"(%98) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %100 = "stablehlo.subtract"(%97, %99) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %101 = "stablehlo.subtract"(%75, %74) : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
    %102 = "stablehlo.broadcast_in_dim"(%101) <{broadcast_dimensions = array<i64: 0>}> : (tensor<1xf32>) -> tensor<4xf32>
    %103 = "stablehlo.multiply"(%100, %102) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %104 = "stablehlo.broadcast_in_dim"(%74) <{broadcast_dimensions = array<i64: 0>}> : (tensor<1xf32>) -> tensor<4xf32>
    %105 = "stablehlo.add"(%103, %104) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %106 = "stablehlo.broadcast_in_dim"(%74) <{broadcast_dimensions = array<i64: 0>}> : (tensor<1xf32>) -> tensor<4xf32>
    %107 = "stablehlo.maximum"(%106, %105) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%107) : (tensor<4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<4xui32>, tensor<4xui32>), sym_name = "threefry2x32_4", sym_visibility = "private"}> ({
  ^bb0(%arg8: tensor<ui32>, %arg9: tensor<ui32>, %arg10: tensor<4xui32>, %arg11: tensor<4xui32>):
    %55 = "stablehlo.constant"() <{value = dense<[13, 15, 26, 6]> : tensor<4xui32>}> : () -> tensor<4xui32>
    %56 = "stablehlo.constant"() <{value = dense<[17, 29, 16, 24]> : tensor<4xui32>}> : () -> tensor<4xui32>
    %57 = "stablehlo.xor"(%arg8, %arg9) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %58 = "stablehlo.constant"() <{value = dense<466688986> : tensor<ui32>}> : () -> tensor<ui32>
    %59 = "stablehlo.xor"(%57, %58) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %60 = "stablehlo.broadcast_in_dim"(%arg8) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %61 = "stablehlo.add"(%arg10, %60) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %62 = "stablehlo.broadcast_in_dim"(%arg9) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %63 = "stablehlo.add"(%arg11, %62) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %64 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %65 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %66:9 = "stablehlo.while"(%65, %64, %61, %63, %arg9, %59, %arg8, %55, %56) ({
    ^bb0(%arg21: tensor<i32>, %arg22: tensor<i32>, %arg23: tensor<4xui32>, %arg24: tensor<4xui32>, %arg25: tensor<ui32>, %arg26: tensor<ui32>, %arg27: tensor<ui32>, %arg28: tensor<4xui32>, %arg29: tensor<4xui32>):
      %70 = "stablehlo.constant"() <{value = dense<5> : tensor<i32>}> : () -> tensor<i32>
      %71 = "stablehlo.compare"(%arg21, %70) <{compare_type = #stablehlo<comparison_type SIGNED>, comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
      "stablehlo.return"(%71) : (tensor<i1>) -> ()
    }, {
    ^bb0(%arg12: tensor<i32>, %arg13: tensor<i32>, %arg14: tensor<4xui32>, %arg15: tensor<4xui32>, %arg16: tensor<ui32>, %arg17: tensor<ui32>, %arg18: tensor<ui32>, %arg19: tensor<4xui32>, %arg20: tensor<4xui32>):
      %67:8 = "func.call"(%arg13, %arg14, %arg15, %arg16, %arg17, %arg18, %arg19, %arg20) <{callee = @closed_call_5}> : (tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>)
      %68 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
      %69 = "stablehlo.add"(%arg12, %68) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      "stablehlo.return"(%69, %67#0, %67#1, %67#2, %67#3, %67#4, %67#5, %67#6, %67#7) : (tensor<i32>, tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> ()
    }) : (tensor<i32>, tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>)
    "func.return"(%66#2, %66#3) : (tensor<4xui32>, tensor<4xui32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> (tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>), sym_name = "closed_call_5", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<i32>, %arg1: tensor<4xui32>, %arg2: tensor<4xui32>, %arg3: tensor<ui32>, %arg4: tensor<ui32>, %arg5: tensor<ui32>, %arg6: tensor<4xui32>, %arg7: tensor<4xui32>):
    %0 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %1 = "stablehlo.add"(%arg0, %0) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %2 = "stablehlo.slice"(%arg6) <{limit_indices = array<i64: 1>, start_indices = array<i64: 0>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %3 = "stablehlo.reshape"(%2) : (tensor<1xui32>) -> tensor<ui32>
    %4 = "stablehlo.add"(%arg1, %arg2) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %5 = "stablehlo.broadcast_in_dim"(%3) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %6 = "stablehlo.shift_left"(%arg2, %5) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %7 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %8 = "stablehlo.subtract"(%7, %3) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %9 = "stablehlo.broadcast_in_dim"(%8) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %10 = "stablehlo.shift_right_logical"(%arg2, %9) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %11 = "stablehlo.or"(%6, %10) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %12 = "stablehlo.xor"(%4, %11) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %13 = "stablehlo.slice"(%arg6) <{limit_indices = array<i64: 2>, start_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %14 = "stablehlo.reshape"(%13) : (tensor<1xui32>) -> tensor<ui32>
    %15 = "stablehlo.add"(%4, %12) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %16 = "stablehlo.broadcast_in_dim"(%14) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %17 = "stablehlo.shift_left"(%12, %16) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %18 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %19 = "stablehlo.subtract"(%18, %14) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %20 = "stablehlo.broadcast_in_dim"(%19) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %21 = "stablehlo.shift_right_logical"(%12, %20) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %22 = "stablehlo.or"(%17, %21) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %23 = "stablehlo.xor"(%15, %22) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %24 = "stablehlo.slice"(%arg6) <{limit_indices = array<i64: 3>, start_indices = array<i64: 2>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %25 = "stablehlo.reshape"(%24) : (tensor<1xui32>) -> tensor<ui32>
    %26 = "stablehlo.add"(%15, %23) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %27 = "stablehlo.broadcast_in_dim"(%25) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %28 = "stablehlo.shift_left"(%23, %27) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %29 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %30 = "stablehlo.subtract"(%29, %25) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %31 = "stablehlo.broadcast_in_dim"(%30) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %32 = "stablehlo.shift_right_logical"(%23, %31) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %33 = "stablehlo.or"(%28, %32) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %34 = "stablehlo.xor"(%26, %33) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %35 = "stablehlo.slice"(%arg6) <{limit_indices = array<i64: 4>, start_indices = array<i64: 3>, strides = array<i64: 1>}> : (tensor<4xui32>) -> tensor<1xui32>
    %36 = "stablehlo.reshape"(%35) : (tensor<1xui32>) -> tensor<ui32>
    %37 = "stablehlo.add"(%26, %34) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %38 = "stablehlo.broadcast_in_dim"(%36) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %39 = "stablehlo.shift_left"(%34, %38) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %40 = "stablehlo.constant"() <{value = dense<32> : tensor<ui32>}> : () -> tensor<ui32>
    %41 = "stablehlo.subtract"(%40, %36) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %42 = "stablehlo.broadcast_in_dim"(%41) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %43 = "stablehlo.shift_right_logical"(%34, %42) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %44 = "stablehlo.or"(%39, %43) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %45 = "stablehlo.xor"(%37, %44) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %46 = "stablehlo.broadcast_in_dim"(%arg3) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %47 = "stablehlo.add"(%37, %46) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %48 = "stablehlo.broadcast_in_dim"(%arg4) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %49 = "stablehlo.add"(%45, %48) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %50 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %51 = "stablehlo.add"(%arg0, %50) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %52 = "stablehlo.convert"(%51) : (tensor<i32>) -> tensor<ui32>
    %53 = "stablehlo.broadcast_in_dim"(%52) <{broadcast_dimensions = array<i64>}> : (tensor<ui32>) -> tensor<4xui32>
    %54 = "stablehlo.add"(%49, %53) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    "func.return"(%1, %47, %54, %arg4, %arg5, %arg3, %arg7, %arg6) : (tensor<i32>, tensor<4xui32>, tensor<4xui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<4xui32>, tensor<4xui32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()

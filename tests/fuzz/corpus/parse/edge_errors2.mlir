module attributes {a = [[[[[[[[[[{b = #stablehlo.gather<offset_dims = [1], index_vector_dim = 1>}]]]]]]]]]} {
}

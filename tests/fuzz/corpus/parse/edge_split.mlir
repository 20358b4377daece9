func.func @a() {
 func.return
}
// -----
func.func @b() {
 func.return
}

// otpu_fp_tb: drives the fp32 units with operand records in bulk. Input (+in=FILE): records of
// three big-endian words {op, a, b}; output (+out=FILE): one little-endian word per record, in
// order. Ops: 0 add, 1 sub, 2 mul, 3 exp2, 4 recip, 5 rsqrt, 6 log2, 7 max, 8 min, 9 abs,
// 10 f2i, 11 i2f of the 48-bit integer {b[15:0], a}. The composite ops go through the pipeline
// (one element per cycle); every result is delayed to the composite latency so order is kept.
module otpu_fp_tb;
  `include "otpu_fp_funcs.svh"
  localparam int CHUNK = 65536;
  localparam int LAT = 2;                   // otpu_fp_composite's latency

  logic clk = 0;
  always #1 clk = ~clk;

  logic [95:0] rec [CHUNK];
  logic [31:0] op, a, b, y_add, y_mul, y_i2f, y_direct;
  logic        comp_valid;
  logic [1:0]  comp_func;
  logic [31:0] comp_y;
  logic [15:0] comp_tag;
  logic        comp_out_valid;
  logic [31:0] delay_y [LAT];
  logic        delay_direct [LAT];
  logic        feeding = 0;

  otpu_fp_add u_add (.a(a), .b(b), .sub(op == 1), .y(y_add));
  otpu_fp_mul u_mul (.a(a), .b(b), .y(y_mul));
  otpu_fp_i2f #(.W(48)) u_i2f (.i({b[15:0], a}), .y(y_i2f));
  otpu_fp_composite u_comp (.clk(clk), .rst(1'b0), .en(1'b1), .in_valid(comp_valid), .in_func(comp_func),
                            .in_x(a), .in_tag(16'd0), .out_valid(comp_out_valid), .out_y(comp_y), .out_tag(comp_tag));

  always_comb begin
    comp_valid = feeding && op >= 3 && op <= 6;
    comp_func = 2'(op - 3);
    case (op)
      0, 1: y_direct = y_add;
      2: y_direct = y_mul;
      7: y_direct = fmax(a, b);
      8: y_direct = fmin(a, b);
      9: y_direct = fabs(a);
      10: y_direct = f2i(a);
      11: y_direct = y_i2f;
      default: y_direct = 32'd0;
    endcase
  end

  integer fin, fout, n, got, i, total = 0, pending = 0;
  string fn_in, fn_out;

  // results leave LAT cycles after their record entered: the direct ones wait in a shift register
  always_ff @(posedge clk) begin
    for (int k = LAT - 1; k > 0; k--) begin
      delay_y[k] <= delay_y[k - 1];
      delay_direct[k] <= delay_direct[k - 1];
    end
    delay_y[0] <= y_direct;
    delay_direct[0] <= feeding && !(op >= 3 && op <= 6);
    if (delay_direct[LAT - 1]) $fwrite(fout, "%u", delay_y[LAT - 1]);
    else if (comp_out_valid) $fwrite(fout, "%u", comp_y);
  end

  // records go out one per clock from the chunk in memory; the initial block only reloads chunks
  integer idx = 0, n_chunk = 0;
  always_ff @(posedge clk)
    if (idx < n_chunk) begin
      {op, a, b} <= rec[idx];
      feeding <= 1'b1;
      idx <= idx + 1;
    end else feeding <= 1'b0;

  initial begin
    if (!$value$plusargs("in=%s", fn_in) || !$value$plusargs("out=%s", fn_out)) begin
      $display("usage: +in=RECORDS +out=RESULTS");
      $finish;
    end
    fin = $fopen(fn_in, "rb");
    fout = $fopen(fn_out, "wb");
    if (fin == 0 || fout == 0) $fatal(1, "cannot open %s or %s", fn_in, fn_out);
    for (int k = 0; k < LAT; k++) delay_direct[k] = 0;
    forever begin
      got = $fread(rec, fin);
      n = got / 12;
      if (n == 0) break;
      @(negedge clk);
      idx = 0;
      n_chunk = n;
      wait (idx == n_chunk);
      total += n;
      if (n < CHUNK) break;
    end
    repeat (LAT + 3) @(negedge clk);
    $fclose(fout);
    $display("otpu_fp_tb: %0d records", total);
    $finish;
  end
endmodule

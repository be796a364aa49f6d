// otpu_vpu: the vector unit: every VOP function of otpu_core/sim/vector.py on TMEM tiles.
//
// - Elementwise functions stream the tile in row-major order, LANES elements per cycle (crossing
//   rows): A through read port A, B through port B in its broadcast mode (FULL, ROW, COL; SCALAR
//   from the instruction), one adder, two multipliers and the compare logic per lane; the result
//   is written the cycle after the read. EXP2, RECIP, RSQRT, LOG2 and EXP2SUB go through CLANES
//   composite pipelines (otpu_fp_composite), CLANES elements per cycle.
// - Reductions take one row at a time, LANES columns per cycle: RSUM, RSSQ and RDOT add each
//   (product) into partial c mod 64 (fp32.isum_vop), in one of two partial banks, while a fold
//   engine of FOLD adders reduces the other bank's finished row (p[i] += p[i + n], n = 32 .. 1;
//   the +0 pad terms only turn a -0 partial into +0, so levels whose upper half holds only pads
//   are that map). RMAX and ARGMAX keep the running first maximum of the total order.
// - OUTER first reads its column vector Cv and its decay Dv into local buffers (they are read
//   before any write), then streams dst in place: dst = dst * Dv(c) + B(r) * Cv(c).
// - Port B reads a word once where the operand repeats it: a ROW operand (and OUTER's B(r)) once
//   per row, a COL operand in the first row only (later rows take it from a local copy). Under
//   TMEM_IMPL 3 that keeps port B off the banks port A reads (docs/rtl.md).
module otpu_vpu
#(
  parameter int LANES = 4,
  parameter int CLANES = 2,
  parameter int FOLD = 8
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   in_valid,
  input  logic [7:0][31:0]       in_w,
  output logic                   take,
  output logic                   release_o,
  output logic                   done,
  output logic                   err,
  output logic [7:0]             err_code,
  output logic [LANES-1:0]       a_en,
  output logic [LANES-1:0][31:0] a_addr,
  input  logic                   a_gnt,
  input  logic [LANES-1:0][31:0] a_data,
  output logic [LANES-1:0]       b_en,
  output logic [LANES-1:0][31:0] b_addr,
  input  logic                   b_gnt,
  input  logic [LANES-1:0][31:0] b_data,
  output logic [LANES-1:0]       wr_en,
  output logic [LANES-1:0][31:0] wr_addr,
  output logic [LANES-1:0][31:0] wr_data
);
  `include "otpu_defs.svh"
  `include "otpu_fp_funcs.svh"
  localparam int CLAT = 2;                  // otpu_fp_composite latency (10 steps, 5 a cycle)
  // completion after the last element: the 4-stage VPU pipeline (read, op, round, write), and for
  // reductions the fold after it (8 more), as the timing model charges (sim/costs.py)
  localparam int EW_DRAIN = 3, REDUCE_DRAIN = 10;
  localparam int OMAX = 256;                // OUTER columns

  typedef enum logic [2:0] {S_IDLE, S_PRELOAD, S_STREAM, S_DRAIN, S_DONE} state_t;
  state_t state;

  // -- the instruction ------------------------------------------------------------------------------
  logic [7:0][31:0] w;
  logic [31:0] dst, a0, b0, imm;
  logic [15:0] rows, cols, drs, ars, brs;
  logic [7:0]  func;
  logic [1:0]  bmode;
  logic        is_outer, is_reduce, is_sum, is_max, is_comp, reads_b, reads_a;
  assign dst = w[1]; assign a0 = w[2]; assign b0 = w[3]; assign imm = w[7];
  assign rows = w[4][15:0]; assign cols = w[4][31:16];
  assign drs = w[5][15:0]; assign ars = w[5][31:16]; assign brs = w[6][15:0];
  assign func = w[6][23:16]; assign bmode = w[6][25:24];
  assign is_outer = func == V_OUTER;
  assign is_sum = func == V_RSUM || func == V_RSSQ || func == V_RDOT;
  assign is_max = func == V_RMAX || func == V_ARGMAX;
  assign is_reduce = is_sum || is_max;
  assign is_comp = func == V_EXP2 || func == V_RECIP || func == V_RSQRT || func == V_LOG2 || func == V_EXP2SUB;
  assign reads_a = func != V_FILL;
  assign reads_b = func == V_ADD || func == V_SUB || func == V_RSUB || func == V_MUL || func == V_MAX ||
                   func == V_MIN || func == V_FILL || func == V_EXP2SUB || func == V_RDOT || is_outer;

  assign take = (state == S_IDLE || state == S_DONE) && in_valid;
  assign done = state == S_DONE;
  assign release_o = done;
  assign err = 1'b0;
  assign err_code = E_NONE;

  // -- element enumeration: the next group of elements ------------------------------------------------
  logic [15:0] r, c;                        // next element to issue
  logic [LANES-1:0]       g_en;
  logic [LANES-1:0][15:0] g_r, g_c;
  int group;
  always_comb begin
    logic [15:0] rr, cc;
    group = is_comp ? CLANES : LANES;
    rr = r; cc = c;
    for (int l = 0; l < LANES; l++) begin
      g_r[l] = rr; g_c[l] = cc;
      g_en[l] = state == S_STREAM && l < group && rr < rows && cols != 0 && rows != 0;
      if (is_reduce && rr != r) g_en[l] = 1'b0;          // a reduction group stays in its row
      if (cc + 1 == cols) begin cc = 0; rr = rr + 1; end
      else cc = cc + 1;
    end
  end

  // a reduction row waits while both partial banks are busy
  logic        bank;                        // bank being accumulated
  logic [1:0]  bank_busy;                   // folding
  logic        stall, next_bank;
  // the bank the issued group will add into (a row ending in stage 1 flips it)
  assign next_bank = (is_sum && |s1_en && row_end) ? ~bank : bank;
  assign stall = is_sum && bank_busy[next_bank];

  // a group goes once both its operand reads are granted (TMEM_IMPL 3 may deny one: it reads
  // again next cycle while the other's words wait in its port's data)
  logic issue_want, issue, pl_go, a_got, b_got, need_a, need_b;
  assign issue_want = state == S_STREAM && g_en[0] && !stall;

  // -- OUTER preload ---------------------------------------------------------------------------------------
  logic [31:0] cv [OMAX], dv [OMAX];
  logic [15:0] pl_c;                        // next column to read
  logic        pl_pend;
  logic [15:0] pl_pc;

  // the word each lane of port B read last (the port's data holds it): a group whose B words are
  // those (ROW and OUTER's row operand within a row) does not read them again, so under TMEM_IMPL 3
  // it does not take their bank from port A each cycle
  logic [LANES-1:0][31:0] b_last;
  logic [LANES-1:0]       b_last_ok;
  // a COL operand is the same `cols` words in every row: rows after the first take them from the
  // words the first row read (kept in cv, which only OUTER uses otherwise). cols >= LANES keeps a
  // group's later-row lanes behind the first row's lanes of their columns
  logic                   col_cache;
  assign col_cache = bmode == B_COL && !is_outer && reads_b && rows > 1 && 32'(cols) >= LANES && 32'(cols) <= OMAX;

  always_comb begin
    need_a = 1'b0; need_b = 1'b0;
    a_en = '0; b_en = '0;
    for (int l = 0; l < LANES; l++) begin
      a_addr[l] = a0 + 32'(g_r[l]) * 32'(ars) + 32'(g_c[l]);
      case (bmode)
        B_FULL: b_addr[l] = b0 + 32'(g_r[l]) * 32'(brs) + 32'(g_c[l]);
        B_ROW: b_addr[l] = b0 + 32'(g_r[l]) * 32'(brs);
        default: b_addr[l] = b0 + 32'(g_c[l]);
      endcase
      if (is_outer) begin
        a_addr[l] = dst + 32'(g_r[l]) * 32'(drs) + 32'(g_c[l]);
        b_addr[l] = b0 + 32'(g_r[l]) * 32'(brs);
      end
      if (issue_want) begin
        a_en[l] = g_en[l] && (reads_a || is_outer);
        b_en[l] = g_en[l] && reads_b && (bmode != B_SCALAR || is_outer) && !(b_last_ok[l] && b_last[l] == b_addr[l]) &&
                  !(col_cache && g_r[l] != 0);
      end
      if (state == S_PRELOAD) begin
        a_addr[l] = imm + 32'(pl_c) + l;                         // Cv
        b_addr[l] = w[0][24] ? a0 : a0 + 32'(pl_c) + l;          // Dv (DSCALAR: one word)
        a_en[l] = !pl_pend && 32'(pl_c) + l < 32'(cols);
        b_en[l] = !pl_pend && 32'(pl_c) + l < 32'(cols) && !w[0][25];
      end
      need_a = need_a || a_en[l];
      need_b = need_b || b_en[l];
    end
    if (a_got) a_en = '0;
    if (b_got) b_en = '0;
    issue = issue_want && (!need_a || a_got || a_gnt) && (!need_b || b_got || b_gnt);
    pl_go = state == S_PRELOAD && !pl_pend && (!need_a || a_got || a_gnt) && (!need_b || b_got || b_gnt);
  end

  always_ff @(posedge clk) begin
    for (int l = 0; l < LANES; l++) if (b_en[l] && b_gnt) b_last[l] <= b_addr[l];
    // a new instruction reads afresh: other units may have written the words since
    if (rst || take) b_last_ok <= '0;
    else b_last_ok <= b_last_ok | (b_gnt ? b_en : '0);
    if (rst || take || issue || pl_go) begin
      a_got <= 1'b0;
      b_got <= 1'b0;
    end else if (issue_want || (state == S_PRELOAD && !pl_pend)) begin
      a_got <= a_got || (need_a && a_gnt);
      b_got <= b_got || (need_b && b_gnt);
    end
  end

  // -- stage 1: operands back from TMEM --------------------------------------------------------------------
  logic [LANES-1:0]       s1_en;
  logic [LANES-1:0][15:0] s1_r, s1_c;
  logic                   s1_last_of_row;
  always_ff @(posedge clk) begin
    s1_en <= issue ? g_en : '0;
    s1_r <= g_r;
    s1_c <= g_c;
  end

  logic [LANES-1:0][31:0] A, B;
  always_comb for (int l = 0; l < LANES; l++) begin
    A[l] = a_data[l];
    B[l] = bmode == B_SCALAR && !is_outer ? imm : (col_cache && s1_r[l] != 0 ? cv[s1_c[l][7:0]] : b_data[l]);
  end

  // per-lane arithmetic
  logic [LANES-1:0][31:0] add_a, add_b, add_y, mul1_a, mul1_b, mul1_y, mul2_a, mul2_b, mul2_y, ew;
  logic [LANES-1:0]       add_sub;
  logic [1:0][LANES-1:0][31:0] part_rd;     // the partial each lane adds into
  logic [LANES-1:0][5:0]  pidx;
  for (genvar l = 0; l < LANES; l++) begin : g_lane
    otpu_fp_add u_add (.a(add_a[l]), .b(add_b[l]), .sub(add_sub[l]), .y(add_y[l]));
    otpu_fp_mul u_mul1 (.a(mul1_a[l]), .b(mul1_b[l]), .y(mul1_y[l]));
    otpu_fp_mul u_mul2 (.a(mul2_a[l]), .b(mul2_b[l]), .y(mul2_y[l]));
  end

  logic [31:0] part [2][64];
  always_comb for (int l = 0; l < LANES; l++) begin
    pidx[l] = s1_c[l][5:0];
    mul1_a[l] = A[l]; mul1_b[l] = B[l];
    mul2_a[l] = B[l]; mul2_b[l] = cv[s1_c[l][7:0]];
    add_a[l] = A[l]; add_b[l] = B[l]; add_sub[l] = 1'b0;
    case (func)
      V_SUB, V_EXP2SUB: add_sub[l] = 1'b1;
      V_RSUB: begin add_a[l] = B[l]; add_b[l] = A[l]; add_sub[l] = 1'b1; end
      V_OUTER: begin
        mul1_b[l] = dv[w[0][24] ? 8'd0 : s1_c[l][7:0]];
        if (w[0][25]) mul1_b[l] = ONE;
        add_a[l] = mul1_y[l]; add_b[l] = mul2_y[l];
      end
      V_RSUM: begin add_a[l] = part[bank][pidx[l]]; add_b[l] = A[l]; end
      V_RSSQ: begin mul1_b[l] = A[l]; add_a[l] = part[bank][pidx[l]]; add_b[l] = mul1_y[l]; end
      V_RDOT: begin add_a[l] = part[bank][pidx[l]]; add_b[l] = mul1_y[l]; end
      default: ;
    endcase
    case (func)
      V_ADD, V_SUB, V_RSUB, V_OUTER: ew[l] = add_y[l];
      V_MUL: ew[l] = mul1_y[l];
      V_MAX: ew[l] = fmax(A[l], B[l]);
      V_MIN: ew[l] = fmin(A[l], B[l]);
      V_COPY: ew[l] = ftz(A[l]);
      V_ABS: ew[l] = fabs(A[l]);
      V_FILL: ew[l] = ftz(B[l]);
      default: ew[l] = add_y[l];
    endcase
  end

  // -- composite pipelines ----------------------------------------------------------------------------------
  logic [CLANES-1:0]       cp_out_valid;
  logic [CLANES-1:0][31:0] cp_out_y;
  logic [CLANES-1:0][31:0] cp_out_tag;
  logic [1:0] cfunc;
  always_comb case (func)
    V_RECIP: cfunc = 2'd1;
    V_RSQRT: cfunc = 2'd2;
    V_LOG2: cfunc = 2'd3;
    default: cfunc = 2'd0;
  endcase
  for (genvar l = 0; l < CLANES; l++) begin : g_comp
    otpu_fp_composite #(.TAG_W(32)) u_comp (
      .clk, .rst, .en(1'b1), .in_valid(is_comp && s1_en[l]), .in_func(cfunc),
      .in_x(func == V_EXP2SUB ? add_y[l] : A[l]),
      .in_tag(dst + 32'(s1_r[l]) * 32'(drs) + 32'(s1_c[l])),
      .out_valid(cp_out_valid[l]), .out_y(cp_out_y[l]), .out_tag(cp_out_tag[l]));
  end

  // -- reductions: running maxima and the fold ---------------------------------------------------------------
  logic [31:0] best_key, best_val, best_idx;
  logic        best_any;
  logic        row_end;                    // stage 1 holds the last group of its row
  logic [15:0] row_of_s1;
  always_comb begin
    row_end = 1'b0;
    row_of_s1 = s1_r[0];
    for (int l = 0; l < LANES; l++) if (s1_en[l] && s1_c[l] + 1 == cols) row_end = 1'b1;
  end

  // the group's first maximum merged with the running one (strictly greater replaces)
  logic [31:0] m_key, m_val, m_idx;
  logic        m_any;
  always_comb begin
    m_key = best_key; m_val = best_val; m_idx = best_idx; m_any = best_any;
    for (int l = 0; l < LANES; l++)
      if (s1_en[l]) begin
        logic [31:0] k, v;
        v = ftz(A[l]);
        k = key_of(v);
        if (!m_any || k > m_key) begin m_key = k; m_val = v; m_idx = 32'(s1_c[l]); m_any = 1'b1; end
      end
  end

  // the row a bank holds
  logic [15:0] fold_row [2];
  always_ff @(posedge clk)
    if (is_sum && |s1_en && row_end) fold_row[bank] <= row_of_s1;

  // fold engine
  logic        f_active, f_bank;
  logic [5:0]  f_n, f_i;
  logic [15:0] f_row;
  logic [15:0] f_cols;
  logic [FOLD-1:0][31:0] f_a, f_b, f_y;
  for (genvar k = 0; k < FOLD; k++) begin : g_fold
    otpu_fp_add u_fadd (.a(f_a[k]), .b(f_b[k]), .sub(1'b0), .y(f_y[k]));
  end
  always_comb for (int k = 0; k < FOLD; k++) begin
    f_a[k] = part[f_bank][6'(f_i + k)];
    f_b[k] = part[f_bank][6'(f_i + k + f_n)];
  end
  logic f_write, f_start, f_sel;
  logic [31:0] f_result, pad_from;
  assign f_start = !f_active && bank_busy != 0;
  assign f_sel = !bank_busy[0];
  assign pad_from = cols % 64 == 0 ? 64 : 32'(cols % 64);
  assign f_write = f_active && f_n == 0;
  assign f_result = part[f_bank][0];

  logic [31:0] argmax_f;
  otpu_fp_i2f #(.W(32)) u_argmax_index (.i(m_idx + imm), .y(argmax_f));   // the int32 column index + base

  // -- writes ------------------------------------------------------------------------------------------------------
  logic [15:0] row_out;
  logic        max_write;
  assign max_write = is_max && row_end && |s1_en;
  always_comb begin
    wr_en = '0;
    for (int l = 0; l < LANES; l++) begin
      wr_addr[l] = dst + 32'(s1_r[l]) * 32'(drs) + 32'(s1_c[l]);
      wr_data[l] = ew[l];
    end
    if (!is_reduce && !is_comp) wr_en = s1_en;
    if (is_comp)
      for (int l = 0; l < CLANES; l++) begin
        wr_en[l] = cp_out_valid[l];
        wr_addr[l] = cp_out_tag[l];
        wr_data[l] = cp_out_y[l];
      end
    if (max_write) begin
      wr_en[0] = 1'b1;
      wr_addr[0] = dst + 32'(row_of_s1) * 32'(drs);
      wr_data[0] = m_val;
      if (func == V_ARGMAX) begin
        wr_en[1] = 1'b1;
        wr_addr[1] = dst + 32'(row_of_s1) * 32'(drs) + 1;
        wr_data[1] = argmax_f;
      end
    end
    if (f_write) begin
      wr_en[0] = 1'b1;
      wr_addr[0] = dst + 32'(f_row) * 32'(drs);
      wr_data[0] = f_result;
    end
  end

  // -- control ---------------------------------------------------------------------------------------------------
  logic [4:0] drain;
  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      f_active <= 1'b0;
      bank_busy <= '0;
    end else begin
      case (state)
        S_PRELOAD: begin
          if (pl_go) begin
            pl_pend <= 1'b1;
            pl_pc <= pl_c;
            pl_c <= pl_c + LANES;
          end else if (pl_pend) begin
            for (int l = 0; l < LANES; l++)
              if (32'(pl_pc) + l < 32'(cols)) begin
                cv[8'(pl_pc + l)] <= a_data[l];
                dv[8'(pl_pc + l)] <= w[0][24] ? b_data[0] : b_data[l];
              end
            pl_pend <= 1'b0;
            if (32'(pl_c) >= 32'(cols)) state <= S_STREAM;
          end
        end
        S_STREAM: begin
          if (issue) begin
            logic [15:0] nr, nc;
            nr = r; nc = c;
            for (int l = 0; l < LANES; l++)
              if (g_en[l]) begin
                nr = g_c[l] + 1 == cols ? g_r[l] + 1 : g_r[l];
                nc = g_c[l] + 1 == cols ? 16'd0 : g_c[l] + 1;
              end
            r <= nr;
            c <= nc;
            if (nr >= rows) begin
              state <= S_DRAIN;
              drain <= 5'(is_comp ? CLAT + 1 : (is_reduce ? REDUCE_DRAIN : EW_DRAIN));
            end
          end
        end
        S_DRAIN: begin
          if (drain != 0) drain <= drain - 1;
          if (drain <= 1 && (!is_reduce || (!f_active && bank_busy == 0 && s1_en == 0))) state <= S_DONE;
        end
        default: state <= S_IDLE;
      endcase

      // reductions: partials, maxima, row ends
      if (is_reduce && |s1_en) begin
        if (is_sum)
          for (int l = 0; l < LANES; l++) if (s1_en[l]) part[bank][pidx[l]] <= add_y[l];
        best_key <= m_key; best_val <= m_val; best_idx <= m_idx; best_any <= m_any;
        if (row_end) begin
          best_any <= 1'b0;
          if (is_sum) begin
            bank_busy[bank] <= 1'b1;
            bank <= ~bank;
          end
        end
      end

      // the fold of a finished bank (the pad map first, then the levels)
      if (f_start) begin
        f_active <= 1'b1;
        f_bank <= f_sel;
        f_row <= fold_row[f_sel];
        for (int q = 0; q < 64; q++)
          if ((q >= pad_from || cols <= 32) && part[f_sel][q] == 32'h80000000) part[f_sel][q] <= 32'd0;
        f_n <= cols > 32 ? 6'd32 : (cols > 16 ? 6'd16 : (cols > 8 ? 6'd8 : (cols > 4 ? 6'd4 : (cols > 2 ? 6'd2 : (cols > 1 ? 6'd1 : 6'd0)))));
        f_i <= 0;
      end else if (f_active && f_n != 0) begin
        for (int k = 0; k < FOLD; k++) if (32'(f_i) + k < 32'(f_n)) part[f_bank][6'(f_i + k)] <= f_y[k];
        if (32'(f_i) + FOLD >= 32'(f_n)) begin
          f_n <= f_n >> 1;
          f_i <= 0;
        end else f_i <= f_i + FOLD;
      end else if (f_active) begin
        // result written this cycle; the bank starts again from +0
        f_active <= 1'b0;
        bank_busy[f_bank] <= 1'b0;
        for (int q = 0; q < 64; q++) part[f_bank][q] <= 32'd0;
      end

      // the first row's COL words, for the rows after it
      if (col_cache)
        for (int l = 0; l < LANES; l++) if (s1_en[l] && s1_r[l] == 0) cv[s1_c[l][7:0]] <= b_data[l];

      if (take) begin
        w <= in_w;
        r <= 0;
        c <= 0;
        pl_c <= 0;
        pl_pend <= 1'b0;
        best_any <= 1'b0;
        state <= (in_w[4][15:0] == 0 || in_w[4][31:16] == 0) ? S_DONE
                 : (in_w[6][23:16] == V_OUTER ? S_PRELOAD : S_STREAM);
      end
    end
  end


  initial for (int b = 0; b < 2; b++) for (int q = 0; q < 64; q++) part[b][q] = 32'd0;
endmodule

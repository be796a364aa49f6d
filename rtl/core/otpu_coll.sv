// otpu_coll: the collective unit of a single-slice machine. BAR completes at once (the window has
// made it wait for every older instruction, and every younger one waits for it); GATHER copies
// the slice's own tile to dst + 0*seg (with one slice, the all-gather is that copy), LANES words
// per cycle in row-major order.
module otpu_coll
#(
  parameter int LANES = 4
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
  output logic [LANES-1:0]       rd_en,
  output logic [LANES-1:0][31:0] rd_addr,
  input  logic                   rd_gnt,
  input  logic [LANES-1:0][31:0] rd_data,
  output logic [LANES-1:0]       wr_en,
  output logic [LANES-1:0][31:0] wr_addr,
  output logic [LANES-1:0][31:0] wr_data
);
  `include "otpu_defs.svh"
  typedef enum logic [1:0] {S_IDLE, S_COPY, S_DONE} state_t;
  state_t state;
  logic [7:0][31:0] w;
  logic [15:0] rows, cols, r, c;            // next element to read
  logic [LANES-1:0] p_en;                   // reads in flight: their destinations
  logic [LANES-1:0][31:0] p_dst;
  logic reading;

  assign take = (state == S_IDLE || state == S_DONE) && in_valid;
  assign done = state == S_DONE;
  assign release_o = done;
  assign err = 1'b0;
  assign err_code = E_NONE;
  assign rows = w[3][15:0];
  assign cols = w[3][31:16];
  assign reading = state == S_COPY && r < rows && cols != 0;

  // the next LANES elements of the tile in row-major order
  logic [LANES-1:0][15:0] er, ec;
  always_comb begin
    logic [15:0] rr, cc;
    rr = r; cc = c;
    for (int l = 0; l < LANES; l++) begin
      er[l] = rr; ec[l] = cc;
      rd_en[l] = reading && rr < rows;
      rd_addr[l] = w[1] + 32'(rr) * w[4] + 32'(cc);
      if (cc + 1 == cols) begin cc = 0; rr = rr + 1; end
      else cc = cc + 1;
    end
    wr_en = p_en;
    wr_addr = p_dst;
    wr_data = rd_data;
  end

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      p_en <= '0;
    end else begin
      p_en <= '0;
      case (state)
        S_COPY: begin
          if (reading && rd_gnt) begin
            for (int l = 0; l < LANES; l++) begin
              p_en[l] <= rd_en[l];
              p_dst[l] <= w[2] + 32'(er[l]) * w[5] + 32'(ec[l]);
            end
            r <= er[LANES - 1] + (ec[LANES - 1] + 1 == cols ? 16'd1 : 16'd0);
            c <= ec[LANES - 1] + 1 == cols ? 16'd0 : ec[LANES - 1] + 1;
          end
          if (!reading && p_en == 0) state <= S_DONE;
        end
        default: state <= S_IDLE;
      endcase
      if (take) begin
        w <= in_w;
        r <= 0;
        c <= 0;
        state <= in_w[0][7:0] == OP_GATHER ? S_COPY : S_DONE;
      end
    end
  end
endmodule
